"""The scenario catalogue, listed explicitly: no import side effects, no discovery."""

from __future__ import annotations

from lab.scenario import Scenario
from scenarios import (
    advisory_keys,
    advisory_pgbouncer,
    cache_stampede,
    checkout_deadlock,
    cron_rerun,
    deadlock_detector,
    deadlock_reading,
    deadlock_traffic,
    fk_lock_modes,
    hot_row,
    id_sort_order,
    job_queue,
    job_retry,
    lease_gc_pause,
    lock_order_prevention,
    lock_queue,
    lock_timeouts,
    lock_wait_modes,
    locked_limit,
    lost_update,
    money_transfer,
    pool_lock_leak,
    pool_transaction,
    redis_failover,
    row_lock_internals,
    row_lock_modes,
    update_lock_order,
    upsert_idempotency,
    write_skew,
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
    lock_timeouts.SCENARIO,
    pool_lock_leak.SCENARIO,
    pool_transaction.SCENARIO,
    deadlock_detector.SCENARIO,
    deadlock_reading.SCENARIO,
    row_lock_internals.SCENARIO,
    write_skew.SCENARIO,
    advisory_keys.SCENARIO,
    deadlock_traffic.SCENARIO,
    job_retry.SCENARIO,
    row_lock_modes.SCENARIO,
)


def by_id() -> dict[str, Scenario]:
    return {s.id: s for s in SCENARIOS}
