"""job-queue on a real server: SKIP LOCKED claims without waiting or duplicates; leases expire.

Who waits for whom and which jobs each claim took need an order: they are judged on pinned
schedules, where the sequencer grants each claim and commit and the server reports a
session blocked or not (tests/test_pinned.py diffs the golden transcripts in
scenarios/job_queue/expected/). The load judges what only time shows: the lease.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from lab.core.profiles import QUICK
from lab.core.records import Record
from lab.errors import LabError
from lab.pinned import PinnedResult, trace
from lab.servers import Servers
from lab.verify import verify_explore
from scenarios.job_queue import SCENARIO
from scenarios.job_queue.claims import CLAIMS, MEASURED_LINES, claimed
from tests.conftest import RunFn, claims_of

RC = "read_committed"


def invariants(rec: Mapping[str, Any]) -> dict[str, bool]:
    return {i["name"]: i["held"] for i in rec["invariants"]}


async def traced(servers: Servers, *runs: tuple[str, str]) -> dict[tuple[str, str], PinnedResult]:
    """The canonical schedules named (variant, schedule), run pinned."""
    pinned = SCENARIO.pinned
    assert pinned is not None
    plan = [(v, name, pinned.schedules[v][name]) for v, name in runs]
    results = await trace(SCENARIO, servers, plan, [RC], run_id="test", deadlock_ms=1000)
    return {(r.variant, r.name): r for r in results}


def test_registered_with_the_published_lines() -> None:
    """The scenario is in the catalogue and carries the document's three worker lines."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    published = SCENARIO.section("Published")
    assert "worker-1 claimed [1001, 1002, 1003 ... 1010]" in published
    assert "worker-3 claimed []" in SCENARIO.published["fixed"]
    assert "không chờ worker-1, không lấy trùng" in SCENARIO.published["fixed"]
    assert {c.id for c in SCENARIO.claims} == {"LC-16", "LC-17"}


async def test_race_reproduces_the_document(servers: Servers) -> None:
    """Three claims in flight: SKIP LOCKED gives the published batches and nobody waits; with
    no lock, worker-2 waits for worker-1's claim, then takes the same jobs again."""
    got = await traced(servers, ("fixed", "race"), ("buggy-no-lock", "queue"))
    fixed, nolock = got["fixed", "race"].to_json(), got["buggy-no-lock", "queue"].to_json()
    assert [f"worker-{i} claimed {claimed(fixed, f's{i}')}" for i in (1, 2, 3)] == MEASURED_LINES
    assert fixed["waited"] == [] and fixed["kept"]
    first, rest = "[1001, 1002, 1003 ... 1010]", "[1011, 1012, 1013 ... 1020]"
    assert [claimed(nolock, s) for s in ("s1", "s2", "s3")] == [first, first, rest]
    assert nolock["waited"] == ["s2 claim"]
    assert invariants(nolock) == {"no job processed twice": False, "every job processed": True}


async def test_stuck_transaction_hides_a_job(servers: Servers) -> None:
    """LC-17: SKIP LOCKED silently skips jobs an idle-in-transaction claim holds; FOR UPDATE
    waits on it. The order is the schedule's, each step granted once the server reports the
    previous one finished or blocked: no lease or sleep decides it."""
    got = await traced(servers, ("fixed", "race"), ("buggy", "queue"))
    fixed, buggy = got["fixed", "race"].to_json(), got["buggy", "queue"].to_json()
    assert claimed(fixed, "s3") == "[]" and "ERROR" not in fixed["transcript"]
    assert fixed["waited"] == [] and fixed["kept"]
    assert buggy["waited"] == ["s2 claim", "s3 claim"]  # s3 behind s2, still in flight
    assert claimed(buggy, "s3") == "[]" and buggy["kept"]
    lc17 = [c for c in CLAIMS if c.id == "LC-17"]
    cells = {"fixed": fixed, "buggy": buggy}
    for c in lc17:
        [variant] = c.variants
        schedule = "race" if variant == "fixed" else "queue"
        record: Record = {"by_isolation": {RC: {"canonical": {schedule: cells[variant]}}}}
        verdict = c.check({variant: record})
        assert verdict is not None and verdict[0], (c.text, verdict)


async def test_explore_claims_hold(servers: Servers) -> None:
    """Every interleaving of three claims: fixed never waits and never runs a job twice, buggy
    waits in some and is correct, no-lock breaks in some; the canonical claims hold too."""
    result = await verify_explore(SCENARIO, QUICK, servers, run_id="test", write=False)
    assert result is not None and result.error is None, result and result.error
    assert len(result.verdicts) == sum(1 for c in CLAIMS if c.explore) == 11
    assert all(v["status"] == "held" for v in result.verdicts), [
        (v["text"], v["measured"]) for v in result.verdicts if v["status"] != "held"
    ]


async def test_dead_worker_jobs_come_back_after_the_lease(run_scenario: RunFn) -> None:
    """LC-16: worker-2 dies holding 10 jobs; once lease_ms passed another worker runs each once."""
    lease_ms = 300
    params = {"jobs": 30, "lease_ms": lease_ms, "crash": "worker-2"}
    rec = (await run_scenario(SCENARIO, ["fixed"], params=params))["fixed"]
    assert rec["counters"]["orphaned"] == rec["counters"]["reclaimed"] == 10
    # on PostgreSQL's clock: the first reclaim ran after the dead worker's lease ended
    until = rec["samples"]["orphaned_until_ms"]["max"]
    assert rec["samples"]["reclaimed_until_ms"]["min"] - lease_ms >= until
    events = [e["event"] for e in rec["trace"]]
    assert events.index("dies; its jobs stay 'running'") < events.index("reclaims expired lease")
    assert rec["outcomes"] == {"claimed": 2, "died": 1}
    assert invariants(rec) == {"no job processed twice": True, "every job processed": True}
    assert claims_of(rec) == {"LC-16": [True, True]}  # invariants, reclaim


async def test_load_runs_every_job_once(run_scenario: RunFn) -> None:
    """The default load (3 workers, worker-2 dies): FOR UPDATE and SKIP LOCKED each run every
    job exactly once; the pinned claims are not judged on a load, naming explore."""
    records = await run_scenario(SCENARIO, ["buggy", "fixed"])
    for rec in records.values():
        assert all(invariants(rec).values()), rec["invariants"]
        assert rec["outcomes"]["died"] == 1
    why = {n["why"] for r in records.values() for n in r["claims_not_judged"]}
    assert any("locklab explore job-queue" in w for w in why), why


@pytest.mark.parametrize("params", [{"crash": "worker-9"}, {"lease_ms": 0}, {"jobs": 0}])
async def test_bad_parameters_are_one_clear_error(
    run_scenario: RunFn, params: dict[str, Any]
) -> None:
    """An unknown worker to crash, a zero lease or an empty queue is a LabError naming the knob."""
    with pytest.raises(LabError, match=next(iter(params))):
        await run_scenario(SCENARIO, ["fixed"], params=params)
