"""fk-lock-modes on real servers: FOR UPDATE on a parent blocks child inserts; NO KEY does not."""

from __future__ import annotations

from typing import Any

from scenarios.fk_lock_modes import PROBES, SCENARIO
from tests.conftest import RunFn, claims_of


def probes(rec: dict[str, Any]) -> dict[str, Any]:
    return dict(rec["evidence"]["probes"])


def test_registered_with_the_published_trap() -> None:
    """The scenario is in the catalogue; its docstring quotes the document's FOR UPDATE trap."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    published = " ".join(SCENARIO.section("Published").split())
    assert "FOR UPDATE xung đột với FOR KEY SHARE" in published
    assert {c.id for c in SCENARIO.claims} == {"LC-11", "LC-13", "LC-15"}


async def test_buggy_parent_for_update_blocks_child_and_customer(run_scenario: RunFn) -> None:
    """LC-11, LC-13: the server shows the child INSERT and the customer UPDATE blocked by the holder."""
    rec = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]
    p = probes(rec)
    for name in PROBES:
        assert p[name]["blocked_by"] == [p["holder_pid"]]
        assert not p[name]["done_while_holder_open"]
    tree = rec["evidence"]["blocking_tree"]
    assert [r["pid"] for r in tree if not r["blocked_by"]] == [p["holder_pid"]]
    assert {r["query"] for r in tree if r["blocked_by"]} == set(PROBES.values())
    assert all(i["held"] for i in rec["invariants"]), rec["invariants"]


async def test_buggy_opposite_children_then_for_update_deadlocks(run_scenario: RunFn) -> None:
    """LC-15: items for A and B, then FOR UPDATE on the other's parent: one 40P01, seen by the server."""
    rec = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]
    assert rec["outcomes"] == {"ok": 1, "blocked": 2, "40P01": 1}
    fk = rec["evidence"]["fk_deadlock"]
    assert fk["t1_blocked_by"], "T1 was not waiting when T2 asked"
    assert sorted(fk["ends"].values()) == ["40P01", "ok"]
    assert rec["evidence"]["pg_stat_deadlocks"] == 1
    assert rec["evidence"]["deadlocks"]["cycle_lengths"] == {"2": 1}


async def test_fixed_no_key_update_of_orders_blocks_nobody(run_scenario: RunFn) -> None:
    """The same steps with FOR NO KEY UPDATE OF o: both probes finish under the open lock, no deadlock."""
    rec = (await run_scenario(SCENARIO, ["fixed"]))["fixed"]
    assert rec["outcomes"] == {"ok": 4}
    p = probes(rec)
    for name in PROBES:
        assert p[name]["blocked_by"] is None
        assert p[name]["done_while_holder_open"]
    assert rec["evidence"]["blocking_tree"] == []
    assert rec["evidence"]["fk_deadlock"]["t1_blocked_by"] is None
    assert rec["evidence"]["pg_stat_deadlocks"] == 0
    assert all(i["held"] for i in rec["invariants"]), rec["invariants"]


async def test_every_claim_holds(run_scenario: RunFn) -> None:
    """Both variants at the defaults: every claim (LC-11, LC-13, LC-15, invariants) holds."""
    records = await run_scenario(SCENARIO)
    for rec in records.values():
        assert all(v == [True] * len(v) for v in claims_of(rec).values()), rec["claims"]
    judged = {c["text"] for r in records.values() for c in r["claims"]}
    assert len(judged) == len(SCENARIO.claims)
