"""lost-update on a real server: read-compute-write oversells, the three fixes do not.

Every run forces the interleaving (lab/interleave.py): both buyers read before either
writes, and a writer commits only once the other buyer is blocked behind it, as reported
by pg_stat_activity / pg_blocking_pids(). Nothing depends on timing.
"""

from __future__ import annotations

from typing import Any

import pytest

from lab.errors import LabError
from scenarios.lost_update import SCENARIO
from tests.conftest import RunFn, assert_all_held, claims_of

FIXES = ("fixed", "fixed-for-update", "fixed-optimistic")


def invariants(rec: dict[str, Any]) -> dict[str, bool]:
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


async def test_defaults_reproduce_the_document(run_scenario: RunFn) -> None:
    """Stock 1, two buyers: buggy sells 2; each fix sells 1 and refuses the other; claims hold."""
    records = await run_scenario(SCENARIO)
    assert records["buggy"]["outcomes"] == {"ok": 2}
    assert records["fixed"]["outcomes"] == {"ok": 1, "out_of_stock": 1}
    assert records["fixed-for-update"]["outcomes"] == {"ok": 1, "out_of_stock": 1}
    assert records["fixed-optimistic"]["outcomes"] == {"ok": 1, "conflict": 1}
    assert invariants(records["buggy"]) == {
        "no oversell": False,
        "sold == initial - final stock": False,
        "stock never negative": True,
    }
    for variant in FIXES:
        assert all(invariants(records[variant]).values()), variant
    verdicts = [c for r in records.values() for c in r["claims"]]
    assert {c["id"] for c in verdicts} == {"LC-4", "LC-5", "LC-6", "LC-7"}
    assert_all_held(verdicts)


async def test_buggy_both_read_one_before_either_writes(run_scenario: RunFn) -> None:
    """LC-4: both buyers read stock 1 before the first write; the second writer waited on it."""
    rec = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]
    steps = [(e["event"], e.get("stock")) for e in rec["trace"]]
    assert steps[:3] == [("read", 1), ("read", 1), ("wrote", None)]
    assert ("waits on a lock", None) in steps
    assert rec["counters"] == {"blocked_before_write": 1}


async def test_for_update_waiter_blocks_in_its_read(run_scenario: RunFn) -> None:
    """LC-6: with FOR NO KEY UPDATE the second buyer waits in the SELECT and then reads 0."""
    rec = (await run_scenario(SCENARIO, ["fixed-for-update"]))["fixed-for-update"]
    reads = [e["stock"] for e in rec["trace"] if e["event"] == "read"]
    assert reads == [1, 0]
    assert rec["counters"] == {"blocked_before_read": 1}
    assert claims_of(rec)["LC-6"] == [True]


async def test_repeatable_read_waiter_fails_40001(run_scenario: RunFn) -> None:
    """LC-8: at REPEATABLE READ the guarded UPDATE's waiter gets 40001; buggy stops overselling."""
    records = await run_scenario(
        SCENARIO, ["buggy", "fixed"], params={"isolation": "repeatable_read"}
    )
    for rec in records.values():
        assert rec["outcomes"] == {"ok": 1, "40001": 1}
        assert all(invariants(rec).values())
    assert claims_of(records["fixed"]) == {"LC-8": [True]}
    assert records["buggy"]["claims"] == []  # the READ COMMITTED claims are not exercised


async def test_five_buyers_three_units(run_scenario: RunFn) -> None:
    """Five buyers, stock 3: buggy sells 5, two fixes sell 3, the version column lets 1 win."""
    records = await run_scenario(SCENARIO, n=5, params={"stock": 3})
    assert records["buggy"]["outcomes"] == {"ok": 5}
    assert records["fixed"]["outcomes"] == {"ok": 3, "out_of_stock": 2}
    assert records["fixed-for-update"]["outcomes"] == {"ok": 3, "out_of_stock": 2}
    assert records["fixed-optimistic"]["outcomes"] == {"ok": 1, "conflict": 4}
    for variant in FIXES:
        assert all(invariants(records[variant]).values()), variant


@pytest.mark.parametrize("params", [{"isolation": "chaos"}, {"qty": 0}])
async def test_bad_parameters_are_one_clear_error(
    run_scenario: RunFn, params: dict[str, Any]
) -> None:
    """An unknown isolation level or a zero quantity is a LabError naming the parameter."""
    with pytest.raises(LabError, match=next(iter(params))):
        await run_scenario(SCENARIO, ["fixed"], params=params)
