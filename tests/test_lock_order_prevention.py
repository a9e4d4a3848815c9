"""lock-order-prevention on real Redis: the silent freeze, the fixes, and the two checkers.

Workers 2k and 2k+1 move money in opposite directions between accounts 2k and 2k+1. As a
load they are released in a burst, so every first SET reaches Redis before any second
one; pinned, the schedule both-first forces the same collision step by step (its
transcripts are diffed by tests/test_pinned.py).
"""

from __future__ import annotations

import pytest

from lab.pinned import explore
from lab.servers import Servers
from scenarios import by_id
from scenarios.lock_order_prevention import claims
from scenarios.lock_order_prevention.checkers import (
    HierarchyViolation,
    LockHierarchy,
    LockLevel,
    WaitForGraph,
)
from scenarios.lock_order_prevention.claims import PUBLISHED, SCENARIO
from tests.conftest import RunFn, assert_all_held, claims_of

DP_IDS = {f"DP-{i}" for i in range(1, 8)}
FREEZE_S = 1.0  # a shorter hard limit where only the freeze is looked at


def test_registered_with_the_published_sentences() -> None:
    """The scenario is in the catalogue and its claims' docstring carries each sentence unbroken."""
    assert by_id()["lock-order-prevention"] is SCENARIO
    for sentence in PUBLISHED.values():
        assert sentence in (claims.__doc__ or "")
    assert {c.id for c in SCENARIO.claims} == DP_IDS


def test_wait_for_graph_names_the_cycle_members() -> None:
    """DP-7: a 2- and a 3-cycle are named by their members; a waiter behind one is not."""
    graph = WaitForGraph()
    for waiter, holder in [("w1", "w0"), ("w0", "w1"), ("w9", "w0"), ("a", "b"), ("b", "c")]:
        graph.record_waiting(waiter, holder)
    graph.record_waiting("c", "a")
    graph.record_waiting("x", "y")  # a chain: waits, no cycle
    assert graph.cycles() == [["a", "b", "c"], ["w0", "w1"]]
    chain = WaitForGraph()
    chain.record_waiting("w0", "w1")
    chain.record_waiting("w1", "w2")
    assert chain.cycles() == []


def test_hierarchy_rejects_a_lower_level_while_holding_a_higher() -> None:
    """DP-6: parent before child passes; child then parent, or one level twice, is rejected."""
    ok = LockHierarchy()
    for level in (LockLevel.SYSTEM, LockLevel.REGION, LockLevel.ACCOUNT):
        ok.check((level, 0), level.name)
        ok.hold((level, 0), level.name)
    reversed_path = LockHierarchy()
    reversed_path.hold((LockLevel.ACCOUNT, 1), "account:1")
    with pytest.raises(HierarchyViolation, match=r"Cannot acquire account:0 .* holding account:1"):
        reversed_path.check((LockLevel.ACCOUNT, 0), "account:0")
    with pytest.raises(HierarchyViolation):
        reversed_path.check((LockLevel.ACCOUNT, 1), "account:1 again")
    reversed_path.check((LockLevel.ACCOUNT, 2), "account:2")  # higher rank: allowed


async def test_every_variant_at_the_defaults(run_scenario: RunFn) -> None:
    """10 workers: buggy freezes, the fixes complete, timeout and hierarchy fail; DP-1..7 hold."""
    records = await run_scenario(SCENARIO)
    assert records["buggy"]["outcomes"] == {"timeout": 10}
    for variant in ("fixed", "fixed-trylock", "fixed-coarse"):
        assert records[variant]["outcomes"] == {"ok": 10}, variant
    assert records["hierarchy-check"]["outcomes"] == {"ok": 5, "hierarchy_violation": 5}
    timed = records["timeout-only"]["outcomes"]
    assert timed["lock_timeout"] >= 5 and "timeout" not in timed
    verdicts: dict[str, list[bool]] = {}
    for rec in records.values():
        broken = {i["name"] for i in rec["invariants"] if not i["held"]}
        assert broken == ({"no transfer frozen"} if rec["variant"] == "buggy" else set()), rec
        for cid, held in claims_of(rec).items():
            verdicts.setdefault(cid, []).extend(held)
    assert set(verdicts) == DP_IDS  # the load claims; the explore ones are not judged here
    assert all(all(v) for v in verdicts.values()), [
        c for r in records.values() for c in r["claims"]
    ]


async def test_buggy_pair_freezes_and_the_snapshot_shows_who_waits(run_scenario: RunFn) -> None:
    """Two workers: both killed at the hard limit, no error; the graph shows the cycle in Redis."""
    rec = (await run_scenario(SCENARIO, ["buggy"], n=2, actor_timeout_s=FREEZE_S))["buggy"]
    assert rec["outcomes"] == {"timeout": 2}
    assert rec["latency_ms"]["min"] >= FREEZE_S * 1000
    ev = rec["evidence"]
    [cycle] = ev["wait_for_cycles"]
    assert cycle["members"] == ["worker-0", "worker-1"]
    assert cycle["waits"] == [
        "worker-0 waits for account:1, held by worker-1",
        "worker-1 waits for account:0, held by worker-0",
    ]
    graph = ev["wait_for_graph"]
    assert graph["waiting"] == {"worker-0": "account:1", "worker-1": "account:0"}
    assert {r: h["by"] for r, h in graph["held"].items()} == {
        "account:0": "worker-0",
        "account:1": "worker-1",
    }
    lease_ms = SCENARIO.params["lock_ttl_ms"]
    assert all(h["redis_agrees"] and h["pttl_ms"] > lease_ms - 1000 for h in graph["held"].values())
    assert len(ev["locks_left_pttl_ms"]) == 2  # killed, the workers released nothing
    events = [(e["who"], e["event"]) for e in rec["trace"]]
    assert events.index(("detector", "cycle")) > events.index(("worker-1", "holds"))
    assert rec["counters"]["set_nx"] > 2  # frozen, yet polling Redis all along


async def test_a_worker_without_partner_is_not_frozen(run_scenario: RunFn) -> None:
    """Odd n: the last worker has its two accounts to itself and completes; the pair freezes."""
    rec = (await run_scenario(SCENARIO, ["buggy"], n=3, actor_timeout_s=FREEZE_S))["buggy"]
    assert rec["outcomes"] == {"ok": 1, "timeout": 2}
    assert [c["members"] for c in rec["evidence"]["wait_for_cycles"]] == [["worker-0", "worker-1"]]
    assert_all_held(rec["claims"])


async def test_explore_freezes_buggy_in_some_interleavings_only(servers: Servers) -> None:
    """Every interleaving of two opposite transfers: buggy freezes in the four where both
    hold their first lock before either asks for its second, sorted ids in none."""
    record = await explore(
        SCENARIO, servers, {"buggy": ["read_committed"], "fixed": ["read_committed"]},
        run_id="test", deadlock_ms=1000,
    )  # fmt: skip
    buggy = record["variants"]["buggy"]["by_isolation"]["read_committed"]
    fixed = record["variants"]["fixed"]["by_isolation"]["read_committed"]
    assert (buggy["ran"], buggy["broke"], buggy["invalid"]) == (6, 4, 0)
    assert buggy["broken_invariants"] == {"no transfer frozen": 4}
    assert (fixed["ran"], fixed["kept"], fixed["invalid"]) == (4, 4, 2)
