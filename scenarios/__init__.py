"""The scenario catalogue, listed explicitly: no import side effects, no discovery."""

from __future__ import annotations

from lab.scenario import Scenario
from scenarios import advisory_pgbouncer, redis_failover
from scenarios import lost_update
from scenarios import cache_stampede, checkout_deadlock, cron_rerun, lease_gc_pause, money_transfer

SCENARIOS: tuple[Scenario, ...] = (
    checkout_deadlock.SCENARIO,
    money_transfer.SCENARIO,
    cache_stampede.SCENARIO,
    cron_rerun.SCENARIO,
    lease_gc_pause.SCENARIO,
    advisory_pgbouncer.SCENARIO,
    redis_failover.SCENARIO,
    lost_update.SCENARIO,
)


def by_id() -> dict[str, Scenario]:
    return {s.id: s for s in SCENARIOS}
