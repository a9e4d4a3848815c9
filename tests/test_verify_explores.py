"""verify runs its explores side by side and gets the same verdicts, in the same order."""

from __future__ import annotations

import pytest

from lab.core.profiles import QUICK
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.servers import Servers
from lab.verify import verify_explores
from scenarios import get


async def test_side_by_side_explores_keep_their_order_and_verdicts(servers: Servers) -> None:
    """Two explores at once: one result each, in the order asked, every claim judged
    and held (hot-row and lost-update hold all of theirs on a sequential run)."""
    chosen = [get("hot-row"), get("lost-update")]
    results = await verify_explores(chosen, QUICK, servers, run_id="test", write=False)
    assert [r.scenario for r in results] == ["hot-row", "lost-update"]
    for r in results:
        assert r.error is None and r.verdicts
        assert all(v["status"] == "held" for v in r.verdicts), r.verdicts


async def test_a_scenario_without_explore_claims_gives_no_result(servers: Servers) -> None:
    """A scenario with no claim about interleavings is skipped, not an empty result."""
    results = await verify_explores(
        [get("redis-failover"), get("hot-row")], QUICK, servers, run_id="test", write=False
    )
    assert [r.scenario for r in results] == ["hot-row"]


async def test_bad_input_in_one_explore_is_raised_as_itself(
    servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LabError in one explore stops them all and reaches the caller as a LabError (the
    command's one line), not wrapped in an exception group."""
    import lab.verify.explore

    async def refuse(sc: Scenario, *args: object, **kwargs: object) -> None:
        raise LabError(f"{sc.id}: refused")

    monkeypatch.setattr(lab.verify.explore, "verify_explore", refuse)
    with pytest.raises(LabError, match="refused"):
        await verify_explores([get("hot-row"), get("lost-update")], QUICK, servers, run_id="t")


def test_big_explores_split_into_parts_and_small_ones_stay_whole() -> None:
    """Parts of at least PART_INTERLEAVINGS interleavings, every variant once, in order."""
    from lab.verify import explore_parts

    money = get("money-transfer")  # 252 interleavings per variant
    assert explore_parts(money, {"buggy": ["read_committed"], "fixed": ["read_committed"]}) == [
        ["buggy"],
        ["fixed"],
    ]
    lost = get("lost-update")  # 20 or 6 per variant
    plan = {v: ["read_committed"] for v in lost.variants}
    assert explore_parts(lost, plan) == [list(lost.variants)]


def test_parts_merge_into_one_record_in_order() -> None:
    """Explore records of parts merge into one, in the order they started."""
    from lab.pinned import merge_explores

    a = {"started_at": "2026-01-01T00:00:02", "isolation": ["serializable"], "variants": {"b": 1}}
    b = {"started_at": "2026-01-01T00:00:01", "isolation": ["read_committed"], "variants": {"f": 2}}
    merged = merge_explores([a, b])
    assert list(merged["variants"]) == ["b", "f"]
    assert merged["isolation"] == ["read_committed", "serializable"]
    assert merged["started_at"] == "2026-01-01T00:00:01"


async def test_a_split_explore_judges_as_a_whole_one(servers: Servers) -> None:
    """update-lock-order explores in two parts (two databases, 210 interleavings each)
    and every explore claim still holds on the merged record."""
    from lab.verify import verify_explore

    res = await verify_explore(
        get("upsert-idempotency"), QUICK, servers, run_id="test", write=False
    )
    assert res is not None and res.error is None and res.verdicts
    assert all(v["status"] == "held" for v in res.verdicts), res.verdicts
