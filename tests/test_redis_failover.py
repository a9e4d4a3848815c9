"""redis-failover on a real Redis primary + replica the run owns, and real PostgreSQL."""

from __future__ import annotations

from scenarios.redis_failover import SCENARIO
from tests.conftest import RunFn, assert_all_held


async def test_failover_loses_the_lock_and_repeats_the_fence(run_scenario: RunFn) -> None:
    """Buggy: B takes the lock on the promoted replica with A's fence; B's write is refused."""
    rec = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]
    ev = rec["evidence"]
    assert [h["who"] for h in ev["holders"]] == ["A", "B"]
    assert ev["fence_a"] == ev["fence_b"] == 6
    assert rec["outcomes"] == {"write_rejected": 1, "stale_write_rejected": 1}
    assert not rec["invariants"][0]["held"]
    assert_all_held(rec["claims"])


async def test_storage_fence_and_wait_protect_the_invoice(run_scenario: RunFn) -> None:
    """Fixed: the storage's fence orders A < B; fixed-wait: A never proceeds without a replica."""
    records = await run_scenario(SCENARIO, ["fixed", "fixed-wait"])
    fixed, waited = records["fixed"], records["fixed-wait"]
    assert (fixed["evidence"]["fence_a"], fixed["evidence"]["fence_b"]) == (6, 7)
    assert fixed["outcomes"] == {"wrote": 1, "stale_write_rejected": 1}
    assert waited["outcomes"] == {"wrote": 1, "lock_not_replicated": 1}
    for rec in (fixed, waited):
        assert all(i["held"] for i in rec["invariants"])
        assert_all_held(rec["claims"])
