"""job-queue on a real server: SKIP LOCKED claims without waiting or duplicates; leases expire.

The three claims overlap by construction: a worker commits only once every later worker
has claimed or is reported waiting on a lock (pg_stat_activity, pg_blocking_pids()).
"""

from __future__ import annotations

from typing import Any

import pytest

from lab.errors import LabError
from scenarios.job_queue import SCENARIO
from tests.conftest import RunFn, assert_all_held, claims_of

TEN = {
    "worker-1": "[1001, 1002, 1003 ... 1010]",
    "worker-2": "[1011, 1012, 1013 ... 1020]",
    "worker-3": "[1021, 1022, 1023 ... 1030]",
}


def lines(rec: dict[str, Any]) -> list[str]:
    return list(rec["evidence"]["lines"])


def batches(rec: dict[str, Any]) -> tuple[str, list[str]]:
    """worker-1's batch, and the others' batches in any order: once worker-1 commits, the
    queued workers race for the next rows, and either may win (FOR UPDATE without SKIP LOCKED)."""
    first, *rest = (line.partition(" claimed ")[2] for line in lines(rec))
    return first, sorted(rest)


def invariants(rec: dict[str, Any]) -> dict[str, bool]:
    return {i["name"]: i["held"] for i in rec["invariants"]}


def test_registered_with_the_published_lines() -> None:
    """The scenario is in the catalogue and carries the document's three worker lines."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    published = SCENARIO.section("Published")
    assert "worker-1 claimed [1001, 1002, 1003 ... 1010]" in published
    assert "worker-3 claimed []" in SCENARIO.published["fixed"]
    assert "không chờ worker-1, không lấy trùng" in SCENARIO.published["fixed"]


async def test_defaults_reproduce_the_document(run_scenario: RunFn) -> None:
    """20 jobs, 3 workers: the published batches under SKIP LOCKED; every claim holds."""
    records = await run_scenario(SCENARIO)
    assert lines(records["fixed"]) == [
        "worker-1 claimed [1001, 1002, 1003 ... 1010]",
        "worker-2 claimed [1011, 1012, 1013 ... 1020]",
        "worker-3 claimed []",
    ]
    assert records["fixed"]["outcomes"] == {"claimed": 2, "empty": 1}
    assert records["buggy"]["outcomes"] == {"claimed": 1, "blocked": 2}
    assert batches(records["buggy"]) == batches(records["fixed"])  # same jobs, but queued
    assert records["buggy-no-lock"]["counters"]["double_claimed"] == 10
    assert invariants(records["buggy-no-lock"])["no job processed twice"] is False
    assert records["fixed"]["counters"]["double_claimed"] == 0
    verdicts = [c for r in records.values() for c in r["claims"]]
    assert {c["id"] for c in verdicts} == {"LC-16", "LC-17"}
    assert_all_held(verdicts)
    for variant in ("buggy", "fixed"):
        assert all(invariants(records[variant]).values()), variant


async def test_thirty_jobs_ten_each(run_scenario: RunFn) -> None:
    """30 jobs: SKIP LOCKED ten each; FOR UPDATE the same, queued; no lock: 1001..1010 ×3."""
    params = {"jobs": 30, "crash": ""}
    records = await run_scenario(SCENARIO, ["buggy", "buggy-no-lock", "fixed"], params=params)
    want = [f"{w} claimed {ids}" for w, ids in TEN.items()]
    assert lines(records["fixed"]) == want
    assert records["fixed"]["outcomes"] == {"claimed": 3}
    assert batches(records["buggy"]) == batches(records["fixed"])
    assert records["buggy"]["outcomes"] == {"claimed": 1, "blocked": 2}
    waits = [(e["who"], e["blocked_by"]) for e in records["buggy"]["trace"] if "blocked_by" in e]
    assert waits[0] == ("worker-2", ["worker-1"])
    assert lines(records["buggy-no-lock"]) == [f"{w} claimed {TEN['worker-1']}" for w in TEN]
    for variant in ("buggy", "fixed"):
        assert all(invariants(records[variant]).values()), variant
        assert "died" not in records[variant]["counters"]


async def test_dead_worker_jobs_come_back_after_the_lease(run_scenario: RunFn) -> None:
    """LC-16: worker-2 dies holding 10 jobs; after lease_ms another worker runs each once."""
    lease_ms = 300
    rec = (await run_scenario(SCENARIO, ["fixed"], params={"lease_ms": lease_ms}))["fixed"]
    assert rec["counters"]["orphaned"] == rec["counters"]["reclaimed"] == 10
    assert rec["samples"]["reclaim_after_ms"]["min"] >= lease_ms
    events = [
        e["event"] for e in rec["trace"] if e["who"] != "worker-1" or "reclaims" in e["event"]
    ]
    assert events.index("dies (backend terminated); its jobs stay 'running'") < events.index(
        "reclaims expired lease"
    )
    assert all(invariants(rec).values())
    assert claims_of(rec)["LC-16"] == [True, True, True]  # published lines, invariants, reclaim


async def test_stuck_transaction_hides_a_job(run_scenario: RunFn) -> None:
    """LC-17: SKIP LOCKED silently skips a job a stuck session holds; FOR UPDATE waits on it."""
    records = await run_scenario(SCENARIO, ["buggy", "fixed"], params={"crash": ""})
    fixed, buggy = records["fixed"], records["buggy"]
    assert fixed["evidence"]["stuck"]["claim"] == "returned without it"
    assert fixed["evidence"]["stuck"]["holder_state"] == "idle in transaction"
    assert fixed["counters"]["invisible_jobs"] == 1
    assert buggy["evidence"]["stuck"]["claim"] == "waited on the holder"
    assert ("worker-1", ["stuck"]) in [(e["who"], e.get("blocked_by")) for e in buggy["trace"]]
    for rec in records.values():
        assert rec["counters"]["claimed_after_holder"] == 1
        assert all(invariants(rec).values())
    assert claims_of(fixed)["LC-17"] == [True]


@pytest.mark.parametrize("params", [{"crash": "worker-9"}, {"lease_ms": 0}, {"jobs": 0}])
async def test_bad_parameters_are_one_clear_error(
    run_scenario: RunFn, params: dict[str, Any]
) -> None:
    """An unknown worker to crash, a zero lease or an empty queue is a LabError naming the knob."""
    with pytest.raises(LabError, match=next(iter(params))):
        await run_scenario(SCENARIO, ["fixed"], params=params)
