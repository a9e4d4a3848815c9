"""pool-pitfalls on a real server: a leaked session lock, statements spread over a pool."""

from __future__ import annotations

from scenarios.pool_pitfalls import LATER_RUNS, SCENARIO
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


async def test_statements_on_the_pool_are_no_transaction(run_scenario: RunFn) -> None:
    """pool.execute('BEGIN') .. ROLLBACK undoes nothing and a FOR UPDATE is not held; asyncpg
    says it rolled back a connection released in a transaction. withTx undoes and holds."""
    recs = await run_scenario(SCENARIO, ["buggy", "fixed"])
    st = recs["buggy"]["evidence"]["statements"]
    assert st["balance_after_rollback"] == 900 and st["row_locked"] is False
    assert any("Resetting connection with an active transaction" in n for n in st["asyncpg_notes"])
    fx = recs["fixed"]["evidence"]["statements"]
    assert fx["balance_after_rollback"] == 1000 and fx["row_locked"] is True
    assert fx["asyncpg_notes"] == []
