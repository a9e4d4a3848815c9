"""row-lock-modes on real servers: the 16-pair conflict matrix, key vs non-key UPDATEs."""

from __future__ import annotations

from scenarios.row_lock_modes import SCENARIO
from scenarios.row_lock_modes.row_lock_modes import CONFLICTS
from tests.conftest import RunFn, claims_of


def test_registered_with_the_documents_modes() -> None:
    """The scenario is in the catalogue and quotes the document's order of the four modes."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    assert "FOR UPDATE > FOR NO KEY UPDATE" in " ".join(SCENARIO.section("Published").split())


async def test_key_update_blocks_child_insert_other_column_does_not(run_scenario: RunFn) -> None:
    """UPDATE of the parent's id: the child INSERT waits on the holder; UPDATE of name: it does not."""
    records = await run_scenario(SCENARIO, ["buggy", "fixed"])
    key, other = (records[v]["evidence"]["parent_update"] for v in ("buggy", "fixed"))
    assert key["blocked_by"] == [key["holder"]]
    assert other["blocked_by"] is None


async def test_matrix_is_the_documented_one(run_scenario: RunFn) -> None:
    """LC-34: each of the 16 pairs is blocked (by the holder, and NOWAIT gets 55P03) iff documented."""
    ev = (await run_scenario(SCENARIO, ["matrix"]))["matrix"]["evidence"]
    seen = {(c["held"], c["asked"]): bool(c["blocked_by"]) for c in ev["matrix"]}
    assert seen == {(h, a): a in CONFLICTS[h] for h in CONFLICTS for a in CONFLICTS}
    assert all((c["nowait"] == "55P03") == bool(c["blocked_by"]) for c in ev["matrix"])
    assert ev["matrix_table"].splitlines()[4].startswith("KS ✗  ·  ·  ·")


async def test_every_claim_holds(run_scenario: RunFn) -> None:
    """All three variants at the defaults: every claim holds."""
    records = await run_scenario(SCENARIO)
    for rec in records.values():
        assert all(v == [True] * len(v) for v in claims_of(rec).values()), rec["claims"]
    assert sum(len(r["claims"]) for r in records.values()) == len(SCENARIO.claims)
