"""lease-busy-loop: a real worker process busy in json.loads, real Redis and PostgreSQL."""

from __future__ import annotations

from typing import Any

from lab.core.records import Record
from scenarios.lease_busy_loop import SCENARIO
from tests.conftest import RunFn, assert_all_held


def _ev(rec: Record, who: str, name: str) -> dict[str, Any]:
    return next((e for e in rec["trace"] if e["who"] == who and e["event"] == name), {})


async def test_busy_holder_overlaps_and_only_the_fence_stops_it(run_scenario: RunFn) -> None:
    """A is running (state R, never stopped) while B holds; fixed rejects A's write, buggy not."""
    records = await run_scenario(SCENARIO)
    for name, rec in records.items():
        assert not _ev(rec, "A", "stall"), name  # no SIGSTOP anywhere
        assert rec["evidence"]["a_state_after_b_write"] == "R"
        assert _ev(rec, "A", "idle")["busy_ms"] > rec["params"]["ttl_ms"]
        assert_all_held(rec["claims"])
    assert records["fixed"]["outcomes"] == {"wrote": 1, "write_rejected": 1}
    assert records["buggy"]["outcomes"] == {"wrote": 2}


async def test_a_short_busy_spell_is_not_an_overlap(run_scenario: RunFn) -> None:
    """busy_rows=10: A's parse ends long before its TTL; the overlap claim does not hold."""
    rec = await run_scenario(SCENARIO, ["fixed"], params={"busy_rows": 10, "ttl_ms": 2000})
    verdicts = {c["text"]: c["held"] for c in rec["fixed"]["claims"]}
    overlap = next(t for t in verdicts if "busy in its own event loop" in t)
    assert verdicts[overlap] is False
