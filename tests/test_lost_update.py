"""lost-update on a real server: read-compute-write oversells, the three fixes do not.

The oversell needs an order (both buyers read before either writes): it is judged on
pinned schedules, where the sequencer grants each step and the server reports the
second writer blocked. Under a load nothing forces that order; what must hold under any
order (the fixes never oversell) is judged there.
"""

from __future__ import annotations

from typing import Any

import pytest

from lab.core.profiles import QUICK
from lab.core.records import Record
from lab.errors import LabError
from lab.servers import Servers
from lab.verify import verify_explore
from scenarios.lost_update import SCENARIO
from tests.conftest import RunFn, assert_all_held, claims_of

FIXES = ("fixed", "fixed-for-update", "fixed-optimistic")


def invariants(rec: Record) -> dict[str, bool]:
    return {i["name"]: i["held"] for i in rec["invariants"]}


def test_registered_with_the_published_sentences() -> None:
    """The scenario is in the catalogue; its docstring and records carry the document's lines."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    assert "Bạn vừa bán 2 chiếc khi chỉ có 1." in SCENARIO.published["buggy"]
    assert "Error: OUT_OF_STOCK" in SCENARIO.section("Published")
    assert "UPDATE 0 → 409 Conflict" in SCENARIO.published["fixed-optimistic"]
    for heading in ("Symptom", "Root cause", "Fix", "Published", "See"):
        assert SCENARIO.section(heading), heading


async def test_explore_claims_hold(servers: Servers) -> None:
    """LC-4..LC-8 on pinned schedules: buggy oversells in its canonical order and in some
    interleavings; each fix refuses the second buyer and keeps the invariants in all."""
    result = await verify_explore(SCENARIO, QUICK, servers, run_id="test", write=False)
    assert result is not None and result.error is None, result and result.error
    assert {v["id"] for v in result.verdicts} == {"LC-4", "LC-5", "LC-6", "LC-7", "LC-8"}
    assert_all_held(result.verdicts)
    assert all(v["status"] == "held" for v in result.verdicts)


async def test_load_judges_what_holds_in_any_order(run_scenario: RunFn) -> None:
    """Two buyers as a load: the fixes never oversell (judged); the pinned claims are
    listed as not judged, with the command that judges them."""
    records = await run_scenario(SCENARIO)
    for variant in FIXES:
        assert all(invariants(records[variant]).values()), variant
        assert claims_of(records[variant]) == {"LC-4": [True]}
    why = {n["why"] for r in records.values() for n in r["claims_not_judged"]}
    assert any("locklab explore lost-update" in w for w in why)


async def test_five_buyers_three_units(run_scenario: RunFn) -> None:
    """Five buyers, stock 3, as a load: the guarded UPDATE and the locking read sell
    exactly 3 whatever the order; every fix keeps the invariants."""
    records = await run_scenario(SCENARIO, n=5, params={"stock": 3})
    assert records["fixed"]["outcomes"] == {"ok": 3, "out_of_stock": 2}
    assert records["fixed-for-update"]["outcomes"] == {"ok": 3, "out_of_stock": 2}
    for variant in FIXES:
        assert all(invariants(records[variant]).values()), variant


@pytest.mark.parametrize("params", [{"isolation": "chaos"}, {"qty": 0}])
async def test_bad_parameters_are_one_clear_error(
    run_scenario: RunFn, params: dict[str, Any]
) -> None:
    """An unknown isolation level or a zero quantity is a LabError naming the parameter."""
    with pytest.raises(LabError, match=next(iter(params))):
        await run_scenario(SCENARIO, ["fixed"], params=params)
