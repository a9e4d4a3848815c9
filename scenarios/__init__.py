"""The scenario catalogue, listed explicitly: no import side effects, no discovery.

Each entry names the module that defines one scenario (its id is the name with dashes:
``checkout_deadlock`` is ``checkout-deadlock``). A module is imported only when its
scenario is asked for, so ``locklab run lost-update`` does not import the other 32
(with their redis-py, rich and pinned machinery); ``SCENARIOS`` and ``by_id()`` import
them all, in this order.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.core.scenario import Scenario

MODULES: tuple[str, ...] = (
    "checkout_deadlock",
    "id_sort_order",
    "money_transfer",
    "cache_stampede",
    "cron_rerun",
    "lease_gc_pause",
    "advisory_pgbouncer",
    "redis_failover",
    "lost_update",
    "job_queue",
    "upsert_idempotency",
    "fk_lock_modes",
    "lock_queue",
    "lock_wait_modes",
    "hot_row",
    "lock_order_prevention",
    "update_lock_order",
    "locked_limit",
    "lock_timeouts",
    "pool_lock_leak",
    "pool_transaction",
    "deadlock_detector",
    "deadlock_reading",
    "row_lock_internals",
    "write_skew",
    "advisory_keys",
    "deadlock_traffic",
    "job_retry",
    "row_lock_modes",
    "redlock",
    "lease_busy_loop",
    "side_effects",
    "service_lock_order",
)


def module_id(module: str) -> str:
    return module.replace("_", "-")


IDS: tuple[str, ...] = tuple(module_id(m) for m in MODULES)
_MODULE_OF = dict(zip(IDS, MODULES, strict=True))


def get(scenario_id: str) -> Scenario:
    """The catalogue's scenario `scenario_id` (KeyError if there is none), importing only
    its own module."""
    found: Scenario = importlib.import_module(f"scenarios.{_MODULE_OF[scenario_id]}").SCENARIO
    return found


def by_id() -> dict[str, Scenario]:
    return {i: get(i) for i in IDS}


def __getattr__(name: str) -> tuple[Scenario, ...]:
    """``SCENARIOS``: every scenario of the catalogue, imported on first use."""
    if name == "SCENARIOS":
        return tuple(get(i) for i in IDS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
