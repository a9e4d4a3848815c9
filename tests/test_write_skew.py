"""write-skew on real servers: check-then-update on different rows breaks the on-call rule."""

from __future__ import annotations

import pytest

from scenarios.write_skew import INVARIANT, SCENARIO
from tests.conftest import RunFn, claims_of


def test_registered_with_the_trade_offs_sentence() -> None:
    """The scenario is in the catalogue and quotes the document's on-call example."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    assert "bác sĩ" in SCENARIO.section("Published")


@pytest.mark.parametrize("variant", ["buggy", "buggy-repeatable-read"])
async def test_snapshot_levels_let_both_go_off_call(run_scenario: RunFn, variant: str) -> None:
    """READ COMMITTED and REPEATABLE READ: both saw two on call, both committed, none is left."""
    rec = (await run_scenario(SCENARIO, [variant]))[variant]
    assert rec["outcomes"] == {"ok": 2}
    assert [d["read"] for d in rec["evidence"]["doctors"].values()] == [2, 2]
    assert rec["invariants"] == [{"name": INVARIANT, "held": False, "detail": "0 of 2 on call"}]


async def test_serializable_aborts_one_with_40001(run_scenario: RunFn) -> None:
    """SERIALIZABLE: the same interleaving, one commits and the other fails with 40001."""
    rec = (await run_scenario(SCENARIO, ["fixed-serializable"]))["fixed-serializable"]
    assert rec["outcomes"] == {"ok": 1, "40001": 1}
    assert rec["invariants"][0]["detail"] == "1 of 2 on call"


@pytest.mark.parametrize("variant", ["fixed-lock-shift", "fixed-for-update"])
async def test_a_shared_lock_serialises_them(run_scenario: RunFn, variant: str) -> None:
    """A lock both take: the server shows the second waiting; it then sees one on call and refuses."""
    rec = (await run_scenario(SCENARIO, [variant]))[variant]
    docs = rec["evidence"]["doctors"]
    waiter = [d for d, v in docs.items() if v["waited"]]
    assert len(waiter) == 1 and docs[waiter[0]] == {
        "end": "refused",
        "waited": ["checked"],
        "read": 1,
    }
    assert rec["invariants"][0]["held"]


async def test_every_claim_holds(run_scenario: RunFn) -> None:
    """Every variant at the defaults: every claim holds."""
    records = await run_scenario(SCENARIO)
    for rec in records.values():
        assert all(v == [True] * len(v) for v in claims_of(rec).values()), rec["claims"]
    assert sum(len(r["claims"]) for r in records.values()) == len(SCENARIO.claims)
