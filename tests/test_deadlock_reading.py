"""deadlock-reading on a real server: pg_locks during a deadlock, log_lock_waits, monitoring."""

from __future__ import annotations

from scenarios.deadlock_reading import SCENARIO
from tests.conftest import RunFn, assert_all_held


async def test_snapshot_log_and_monitoring_around_one_deadlock(run_scenario: RunFn) -> None:
    """buggy: pg_locks shows the two-edge cycle the report names, the real log has j1's
    "still waiting" then "acquired" and j2's "detected deadlock", and the monitoring queries
    find one deadlock, customer 2 billed twice and j2's first job still running. fixed: the
    same queries find nothing."""
    recs = await run_scenario(SCENARIO)
    ev = recs["buggy"]["evidence"]
    j1, j2 = ev["pids"]
    assert {(s["waiter"], s["holder"]) for s in ev["snapshot"]} == {(j1, j2), (j2, j1)}
    assert ev["deadlocks"]["reports"] == 1 and ev["deadlocks"]["example"]["victim_pid"] == j2
    assert [(w["pid"], w["event"]) for w in ev["lock_waits"]] == [
        (j1, "still waiting"),
        (j2, "detected deadlock"),
        (j1, "acquired"),
    ]
    m = ev["monitoring"]
    assert m["deadlocks"] == 1
    assert m["duplicate_invoices"] == [{"customer_id": 2, "period": "2026-11", "n": 2}]
    assert m["oldest_running_job"]["customer_id"] == 2
    assert recs["buggy"]["outcomes"] == {"ok": 1, "40P01": 1, "rerun ok": 1}
    fixed = recs["fixed"]
    assert fixed["outcomes"] == {"ok": 2}, fixed["outcomes"]
    assert "lock_waits" not in fixed["evidence"], fixed["evidence"].get("lock_waits")
    assert fixed["evidence"]["monitoring"]["deadlocks"] == 0
    for rec in recs.values():
        assert_all_held(rec["claims"])
