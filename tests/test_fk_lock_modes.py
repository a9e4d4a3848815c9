"""fk-lock-modes on a real server: FOR UPDATE on a parent blocks child inserts and the
joined customer, and deadlocks two requests that each added a child; FOR NO KEY UPDATE OF o
does none of that.

Who waits for whom needs an order: it is judged on pinned schedules, where the sequencer
grants each step and the server reports a session blocked or not. The golden transcripts
in scenarios/fk_lock_modes/expected/ are diffed by tests/test_pinned.py.
"""

from __future__ import annotations

from lab.core.profiles import QUICK
from lab.pinned import trace
from lab.servers import Servers
from lab.verify import verify_explore
from scenarios.fk_lock_modes import SCENARIO
from tests.conftest import RunFn, claims_of


def test_registered_with_the_published_trap() -> None:
    """The scenario is in the catalogue; its docstring quotes the document's FOR UPDATE trap."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    published = " ".join(SCENARIO.section("Published").split())
    assert "FOR UPDATE xung đột với FOR KEY SHARE" in published
    assert {c.id for c in SCENARIO.claims} == {"LC-11", "LC-13", "LC-15"}


async def test_who_waits_under_each_lock_clause(servers: Servers) -> None:
    """The server shows s2's child INSERT and its customer UPDATE blocked under FOR UPDATE,
    neither under FOR NO KEY UPDATE OF o; the cross ends in 40P01 only under FOR UPDATE."""
    pinned = SCENARIO.pinned
    assert pinned is not None
    runs = [(v, name, pinned.schedules[v][name]) for v in ("buggy", "fixed") for name in pinned.schedules[v]]  # fmt: skip
    results = await trace(
        SCENARIO, servers, runs, ["read_committed"], run_id="test", deadlock_ms=100
    )
    # In a deadlock only the first waiter is sure to be seen blocked: the second waits only
    # until a detector fires (100 ms here), and its 40P01 says the server saw it wait.
    got = {
        (r.variant, r.name): (
            r.waited[:1] if "40P01" in r.outcomes.values() else r.waited,
            sorted(r.outcomes.values()),
        )
        for r in results
    }
    assert got == {
        ("buggy", "parent-locked"): (["s2 add-item"], ["ok", "paid"]),
        ("buggy", "customer-locked"): (["s2 rename"], ["ok", "paid"]),
        ("buggy", "cross"): (["s1 lock"], ["40P01", "ok"]),
        ("fixed", "parent-locked"): ([], ["ok", "paid"]),
        ("fixed", "customer-locked"): ([], ["ok", "paid"]),
        ("fixed", "cross"): (["s2 lock"], ["ok", "paid"]),
    }
    assert all(c.held for r in results for c in r.checks)


async def test_explore_claims_hold(servers: Servers) -> None:
    """LC-11, LC-13, LC-15 on every interleaving and the canonical schedules: all held."""
    result = await verify_explore(SCENARIO, QUICK, servers, run_id="test", write=False)
    assert result is not None and result.error is None, result and result.error
    assert {v["id"] for v in result.verdicts} == {"LC-11", "LC-13", "LC-15"}
    assert len(result.verdicts) == 10
    assert all(v["status"] == "held" for v in result.verdicts), [
        (v["text"], v["measured"]) for v in result.verdicts if v["status"] != "held"
    ]


async def test_load_keeps_every_committed_item(run_scenario: RunFn) -> None:
    """Six requests at once (three payers): every committed request left its item in both
    variants; the pinned claims are listed as not judged, naming explore."""
    records = await run_scenario(SCENARIO, n=6)
    for rec in records.values():
        assert all(i["held"] for i in rec["invariants"]), rec["invariants"]
        assert claims_of(rec) == {"LC-11": [True]}
    assert records["fixed"]["outcomes"] == {"paid": 3, "ok": 3}
    why = {n["why"] for r in records.values() for n in r["claims_not_judged"]}
    assert any("locklab explore fk-lock-modes" in w for w in why)
