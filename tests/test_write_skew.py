"""write-skew on real servers: check-then-update on different rows breaks the on-call rule.

The skew needs an order (both doctors check before either writes): it is judged on the
pinned schedule at each isolation level, and on every interleaving. Under a load nothing
forces the order; what must hold in any order (the locks and SERIALIZABLE keep someone
on call) is judged there.
"""

from __future__ import annotations

from typing import Any

import pytest

from lab.core.profiles import QUICK
from lab.errors import LabError
from lab.pinned import trace
from lab.servers import Servers
from lab.verify import verify_explore
from scenarios.write_skew import SCENARIO
from scenarios.write_skew.claims import reads
from tests.conftest import RunFn, assert_all_held, claims_of


def test_registered_with_the_trade_offs_sentence() -> None:
    """The scenario is in the catalogue and quotes the document's on-call example."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    assert "bác sĩ" in SCENARIO.published["fixed-lock-shift"]
    for heading in ("Symptom", "Root cause", "Fix", "Published", "See"):
        assert SCENARIO.section(heading), heading


def test_reads_come_from_the_check_lines() -> None:
    """The rows a check saw are read from its own line, or its `<... completed>` line."""
    text = (
        "s1 check   SELECT name FROM doctors  -> 2 rows; name=alice; name=bob\n"
        "s2 check   SELECT name FROM doctors  <waiting ...>\n"
        "s1 write   UPDATE doctors SET on_call = false  -> UPDATE 1\n"
        "s2 check                             <... completed> 1 row; name=bob\n"
    )
    assert reads({"transcript": text}) == {"s1": 2, "s2": 1}


@pytest.mark.parametrize(
    ("level", "ends", "held"),
    [
        ("read_committed", {"s1": "ok", "s2": "ok"}, False),
        ("repeatable_read", {"s1": "ok", "s2": "ok"}, False),
        ("serializable", {"s1": "ok", "s2": "40001"}, True),
    ],
)
async def test_both_check_first_at_each_level(
    servers: Servers, level: str, ends: dict[str, str], held: bool
) -> None:
    """Both check first: snapshot levels let both go off call, SERIALIZABLE aborts the second."""
    assert SCENARIO.pinned is not None
    steps = SCENARIO.pinned.schedules["buggy"]["both-check-first"]
    [res] = await trace(
        SCENARIO, servers, [("buggy", "both-check-first", steps)], [level], run_id="test",
        deadlock_ms=1000,
    )  # fmt: skip
    assert res.outcomes == ends
    assert reads({"transcript": res.transcript}) == {"s1": 2, "s2": 2}
    assert res.kept is held and res.waited == []


async def test_explore_claims_hold(servers: Servers) -> None:
    """Every pinned claim of LC-31 holds: buggy breaks the rule at RC and RR, gets 40001 at
    SERIALIZABLE, and the locks keep someone on call in every interleaving."""
    result = await verify_explore(SCENARIO, QUICK, servers, run_id="test", write=False)
    assert result is not None and result.error is None, result and result.error
    assert len(result.verdicts) == sum(c.explore for c in SCENARIO.claims) == 12
    assert_all_held(result.verdicts)


async def test_load_judges_what_holds_in_any_order(run_scenario: RunFn) -> None:
    """Two doctors as a load at READ COMMITTED: the locks keep someone on call (judged)."""
    records = await run_scenario(SCENARIO, ["fixed-lock-shift", "fixed-for-update"])
    for rec in records.values():
        assert rec["outcomes"] == {"ok": 1, "refused": 1}
        assert claims_of(rec) == {"LC-31": [True]}


async def test_four_doctors_under_a_lock_leave_one_on_call(run_scenario: RunFn) -> None:
    """Four doctors at once, each fix's lock: three go off call, the last one stays."""
    records = await run_scenario(SCENARIO, ["fixed-lock-shift", "fixed-for-update"], n=4)
    for rec in records.values():
        assert rec["outcomes"] == {"ok": 3, "refused": 1}
        assert rec["invariants"][0] == {
            "name": "at least one doctor on call", "held": True, "detail": "1 of 4 on call",
        }  # fmt: skip


@pytest.mark.parametrize(("n", "params"), [(2, {"isolation": "chaos"}), (1, {})])
async def test_bad_input_is_one_clear_error(
    run_scenario: RunFn, n: int, params: dict[str, Any]
) -> None:
    """An unknown isolation level or a single doctor is a LabError saying what is wrong."""
    with pytest.raises(LabError, match=r"isolation|-n 2"):
        await run_scenario(SCENARIO, ["buggy"], n=n, params=params)
