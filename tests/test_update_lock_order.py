"""update-lock-order on a real server: plan-dependent lock order of a multi-row UPDATE (LC-1).

The pair is pinned to schedules (lab/pinned/sequencer.py): a trigger stops each checkout right
after it locked a row, on a gate the `gate` session opens; the sequencer moves on when
the server reports a session blocked. The golden transcripts are diffed by
tests/test_pinned.py; here the claims are judged as verify judges them.
"""

from __future__ import annotations

import pytest

from lab.core.profiles import QUICK
from lab.errors import LabError
from lab.pinned import trace
from lab.servers import Servers
from lab.verify import verify_explore
from scenarios.update_lock_order import SCENARIO
from tests.conftest import RunFn


def test_registered_with_the_published_text() -> None:
    """In the catalogue, quoting the document's reason and its fix."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    published = " ".join(SCENARIO.section("Published").split())
    assert "phụ thuộc vào plan (join order, index hay seq scan)" in published
    assert "SELECT ... ORDER BY ... FOR UPDATE thì khoá theo thứ tự row được trả về" in published
    assert {c.id for c in SCENARIO.claims} == {"LC-1"}


async def test_each_plan_stops_after_its_first_row(servers: Servers) -> None:
    """Read from the server, not timed: stopped at the gate, the seq-scan UPDATE has locked
    202 (101 still free) and the index UPDATE 101 (202 free); the locking SELECT has
    locked both, sorted, on either plan before its UPDATE reaches the gate."""
    assert SCENARIO.pinned is not None
    runs = [(v, "serial", SCENARIO.pinned.schedules[v]["serial"]) for v in ("buggy", "fixed")]
    buggy, fixed = await trace(
        SCENARIO, servers, runs, ["read_committed"], run_id="test", deadlock_ms=200
    )
    assert "gate open-s1" in buggy.transcript and buggy.waited == ["s1 checkout", "s2 checkout"]
    assert "-> free 101; open" in buggy.transcript and "-> free 202; open" in buggy.transcript
    assert "<... completed> updated 202, 101" in buggy.transcript  # s1, seq-scan
    assert "<... completed> updated 101, 202" in buggy.transcript  # s2, index
    assert fixed.transcript.count("-> free none; open") == 2
    assert fixed.transcript.count("<... completed> locked 101, 202; ") == 2
    assert all(c.held for r in (buggy, fixed) for c in r.checks)


async def test_explore_claims_hold(servers: Servers) -> None:
    """Every interleaving of the gated pair: the plans' orders deadlock in some, the fix in
    none; stock moved once per commit in all; the canonical schedules read as claimed."""
    result = await verify_explore(SCENARIO, QUICK, servers, run_id="test", write=False)
    assert result is not None and result.error is None, result and result.error
    assert len(result.verdicts) == sum(c.explore for c in SCENARIO.claims) == 9
    assert all(v["status"] == "held" for v in result.verdicts), [
        (v["text"], v["measured"]) for v in result.verdicts if v["status"] != "held"
    ]


async def test_a_load_of_the_same_code(run_scenario: RunFn) -> None:
    """`locklab run -n 8`: the same checkouts, no gate; the fix never deadlocks and every
    commit moved the stock once, in both variants."""
    records = await run_scenario(SCENARIO, n=8, deadlock_timeout_ms=100)
    assert records["fixed"]["outcomes"] == {"ok": 8}
    assert set(records["buggy"]["outcomes"]) <= {"ok", "40P01"}
    for rec in records.values():
        assert all(i["held"] for i in rec["invariants"])


async def test_one_checkout_is_not_a_pair(run_scenario: RunFn) -> None:
    """-n 1 is refused, with one line."""
    with pytest.raises(LabError, match="-n 1: this scenario needs a pair of checkouts"):
        await run_scenario(SCENARIO, n=1)
