"""deadlock-detector on a real server: deadlock_timeout against lock_timeout, and the victim."""

from __future__ import annotations

from scenarios.deadlock_detector import SCENARIO
from scenarios.deadlock_detector.deadlock_detector import SHORT_DT_MS
from tests.conftest import RunFn, assert_all_held


async def test_detector_beats_a_longer_lock_timeout_and_picks_the_shorter_timer(
    run_scenario: RunFn,
) -> None:
    """Opposite orders: at lock_timeout 5 s the first waiter gets 40P01 (the detector fired
    first), not before 1 s; at 500 ms 55P03 (lock_timeout fired first), not before 0.5 s; a
    later waiter with deadlock_timeout 200 ms is the victim instead, not before 200 ms. Only
    lower bounds on time: a loaded machine may report any timer late. One lock order: every
    session commits."""
    recs = await run_scenario(SCENARIO, params={"victim_trials": 2})
    ev = recs["buggy"]["evidence"]
    by_timeout = {p["lock_timeout_ms"]: p for p in ev["dp8"]}
    assert by_timeout[5000]["ends"] == ["40P01", "ok"]
    assert by_timeout[5000]["after_ms"][0] >= 1000
    assert by_timeout[500]["ends"][0] == "55P03"
    assert by_timeout[500]["after_ms"][0] >= 500
    assert [p["ends"] for p in ev["victims"]] == [["ok", "40P01"]] * 2
    assert all(p["after_ms"][1] >= SHORT_DT_MS for p in ev["victims"])
    # each pair ran pinned to `cross`: its transcript shows s2's wait end in the deadlock
    for p in ev["victims"]:
        ended = [line for line in p["transcript"].splitlines() if line.startswith("s2 second")]
        assert "ERROR 40P01 deadlock detected" in ended[-1], p["transcript"]
    assert recs["fixed"]["outcomes"] == {"ok": 8}
    for rec in recs.values():
        assert_all_held(rec["claims"])
