"""pool-lock-leak on a real server: a session lock left on a pooled connection (LC-24)."""

from __future__ import annotations

from scenarios.pool_lock_leak import SCENARIO
from scenarios.pool_lock_leak.pool_lock_leak import LATER_RUNS
from tests.conftest import RunFn, assert_all_held


async def test_leaked_lock_blocks_every_other_pod_until_restart(run_scenario: RunFn) -> None:
    """Without a pool reset the failed run's lock stays on pod-1's idle backend (pg_locks);
    pod-2 skips every later run and runs once pod-1's pool is closed. asyncpg's default
    pool leaves nothing; both fixes leave nothing."""
    recs = await run_scenario(SCENARIO)
    leak = recs["buggy"]["evidence"]["leak"]
    assert leak["locks_after_failure"] == [leak["pod1_pid"]]
    assert leak["later"] == ["skipped"] * LATER_RUNS and leak["after_restart"] == "ran"
    assert recs["buggy"]["evidence"]["asyncpg_default"]["locks_after_failure"] == []
    for v in ("fixed", "fixed-xact"):
        assert recs[v]["evidence"]["leak"]["locks_after_failure"] == []
        assert recs[v]["evidence"]["leak"]["later"] == ["ran"] * LATER_RUNS
    for rec in recs.values():
        assert_all_held(rec["claims"])
