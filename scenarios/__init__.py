"""The scenario catalogue, listed explicitly: no import side effects, no discovery."""

from __future__ import annotations

from lab.scenario import Scenario
from scenarios import (
    advisory_pgbouncer,
    cache_stampede,
    checkout_deadlock,
    cron_rerun,
    fk_lock_modes,
    hot_row,
    id_sort_order,
    job_queue,
    lease_busy_loop,
    lease_gc_pause,
    lock_order_prevention,
    lock_queue,
    lock_wait_modes,
    locked_limit,
    lost_update,
    money_transfer,
    redis_failover,
    redlock,
    service_lock_order,
    side_effects,
    update_lock_order,
    upsert_idempotency,
)

SCENARIOS: tuple[Scenario, ...] = (
    checkout_deadlock.SCENARIO,
    id_sort_order.SCENARIO,
    money_transfer.SCENARIO,
    cache_stampede.SCENARIO,
    cron_rerun.SCENARIO,
    lease_gc_pause.SCENARIO,
    advisory_pgbouncer.SCENARIO,
    redis_failover.SCENARIO,
    lost_update.SCENARIO,
    job_queue.SCENARIO,
    upsert_idempotency.SCENARIO,
    fk_lock_modes.SCENARIO,
    lock_queue.SCENARIO,
    lock_wait_modes.SCENARIO,
    hot_row.SCENARIO,
    lock_order_prevention.SCENARIO,
    update_lock_order.SCENARIO,
    locked_limit.SCENARIO,
    redlock.SCENARIO,
    lease_busy_loop.SCENARIO,
    side_effects.SCENARIO,
    service_lock_order.SCENARIO,
)


def by_id() -> dict[str, Scenario]:
    return {s.id: s for s in SCENARIOS}
