"""update-lock-order on a real server: plan-dependent lock order of a multi-row UPDATE (LC-1)."""

from __future__ import annotations

import pytest

from lab.errors import LabError
from scenarios.update_lock_order import FIRST, SCENARIO, SECOND
from tests.conftest import RunFn


def test_registered_with_the_published_text() -> None:
    """In the catalogue, quoting the document's reason and its fix."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    published = " ".join(SCENARIO.section("Published").split())
    assert "phụ thuộc vào plan (join order, index hay seq scan)" in published
    assert "SELECT ... ORDER BY ... FOR UPDATE thì khoá theo thứ tự row được trả về" in published
    assert {c.id for c in SCENARIO.claims} == {"LC-1"}


async def test_the_plan_decides_the_update_lock_order(run_scenario: RunFn) -> None:
    """Read from the server, not timed: the UPDATE locks 101 first on the nested loop and
    202 first on the hash join over a seq scan; the pair on the two plans deadlocks. The
    locking SELECT locks sorted on both plans and the pair succeeds."""
    records = await run_scenario(SCENARIO, deadlock_timeout_ms=100)
    buggy, fixed = records["buggy"], records["fixed"]
    assert buggy["evidence"]["lock_order"] == {
        "index": [FIRST, SECOND],
        "seq-scan": [SECOND, FIRST],
    }
    plans = buggy["evidence"]["plans"]
    assert plans["index"][1:3] == ["Nested Loop", 'Values Scan on "*VALUES*"']
    assert plans["seq-scan"][1:3] == ["Hash Join", "Seq Scan on inventory i"]  # the table drives
    assert buggy["outcomes"] == {"ok": 1, "40P01": 1}
    assert buggy["evidence"]["pg_stat_deadlocks"] == 1
    assert fixed["evidence"]["lock_order"] == {
        "index": [FIRST, SECOND],
        "seq-scan": [FIRST, SECOND],
    }
    assert fixed["outcomes"] == {"ok": 2}
    # both sessions stopped at the gate before it opened: the interleaving was forced
    for rec in (buggy, fixed):
        assert [e["event"] for e in rec["trace"]][2:5] == ["blocked", "blocked", "gate opens"]
        assert all(i["held"] for i in rec["invariants"])
    verdicts = [c for r in records.values() for c in r["claims"]]
    assert len(verdicts) == len(SCENARIO.claims) and all(c["held"] for c in verdicts), verdicts


async def test_the_pair_is_two_checkouts(run_scenario: RunFn) -> None:
    """-n other than 2 is refused, with one line."""
    with pytest.raises(LabError, match="-n 3: this scenario is one pair of checkouts"):
        await run_scenario(SCENARIO, n=3)
