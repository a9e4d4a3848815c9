"""lease-gc-pause on real servers: the published traces, fencing, the frozen holder, DL-12/13."""

from __future__ import annotations

import io
import os
from typing import Any

import pytest
from rich.console import Console

from lab.core.records import Record
from lab.errors import LabError
from lab.load.plan import RunPlan
from lab.load.runner import run_plan
from lab.output.timeline import render
from lab.servers import Servers
from scenarios.lease_gc_pause import SCENARIO, TTL_MS
from tests.conftest import RunFn, assert_all_held, knobs_for

Records = dict[str, Record]
# The document's trace, as (who, what, value): got lock -> fence, release -> result.
PUBLISHED_DEL = [("A", "got lock", 1), ("B", "got lock", 2), ("A", "release", 1),
                 ("C", "got lock", 3), ("C", "release", 1), ("B", "release", 0)]  # fmt: skip
PUBLISHED_CAD = [("A", "got lock", 1), ("B", "got lock", 2), ("A", "release", 0),
                 ("C", "lock busy", None), ("B", "release", 0)]  # fmt: skip
EXPIRY_SLACK_MS = 15  # observer poll (2 ms) + a busy event loop on a 2-core box


def steps(rec: Record) -> list[tuple[str, str, int | None]]:
    """The lock steps of a record's trace, in time order, as the document prints them."""
    out: list[tuple[str, str, int | None]] = []
    for e in rec["trace"]:
        if e["event"] in ("got lock", "release", "lock busy"):
            out.append((e["who"], e["event"], e.get("fence", e.get("result"))))
    return out


def event(rec: Record, who: str, name: str) -> dict[str, Any]:
    return next(e for e in rec["trace"] if e["who"] == who and e["event"] == name)


def spans(rec: Record, who: str, kind: str) -> list[dict[str, Any]]:
    return [
        s for s in rec["evidence"]["timeline"]["spans"] if s["who"] == who and s["kind"] == kind
    ]


@pytest.fixture(scope="module")
async def published(servers: Servers) -> Records:
    """Every variant once with the published defaults (sigstop), shared by the tests below."""
    plan = RunPlan(SCENARIO, list(SCENARIO.variants), knobs_for(SCENARIO), dict(SCENARIO.params),
                   run_id="test", write=False)  # fmt: skip
    return {r["variant"]: r for r in await run_plan(plan, servers)}


async def test_buggy_reproduces_the_published_trace(published: Records) -> None:
    """Plain DEL: A's release deletes B's lock (-> 1), C gets fence 3, B's release finds nothing."""
    rec = published["buggy"]
    assert steps(rec) == PUBLISHED_DEL
    assert rec["outcomes"] == {"wrote": 3}
    assert spans(rec, "B", "redis")[0]["ended"] == "deleted by A"


async def test_fixed_reproduces_the_published_trace(published: Records) -> None:
    """Compare-and-delete: A's release is a no-op, C sees the lock busy, B's lease expires."""
    rec = published["fixed"]
    assert steps(rec) == PUBLISHED_CAD
    assert rec["outcomes"] == {"wrote": 1, "write_rejected": 1, "lock_busy": 1}
    assert spans(rec, "B", "redis")[0]["ended"] == "expired"


async def test_fencing_rejects_the_stale_write(published: Records) -> None:
    """Fixed: B (fence 2) writes 1 row, A (fence 1) 0 rows, the row is B's; buggy: A's lands."""
    fixed, buggy = published["fixed"], published["buggy"]
    assert (event(fixed, "B", "write")["rows"], event(fixed, "A", "write")["rows"]) == (1, 0)
    assert fixed["evidence"]["final_row"] == {"id": 42, "body": "from B", "fence": 2}
    stale = event(buggy, "A", "write")
    assert (stale["fence"], stale["rows"]) == (1, 1)
    assert stale["t_ms"] > event(buggy, "B", "write")["t_ms"]
    assert [i["held"] for i in buggy["invariants"]] == [False]
    assert [i["held"] for i in fixed["invariants"]] == [True]


async def test_every_claim_holds(published: Records) -> None:
    """Every claim of every variant holds, and together they reach DL-10 to DL-13."""
    verdicts = [c for r in published.values() for c in r["claims"]]
    assert [c["measured"] for c in verdicts if not c["held"]] == []
    assert {c["id"] for c in verdicts} == {"DL-10", "DL-11", "DL-12", "DL-13"}


async def test_holder_is_frozen_by_sigstop_and_reaped(published: Records) -> None:
    """A is stopped by the kernel (state T) for the whole pause, and no worker process is left."""
    for variant in ("buggy", "fixed", "buggy-get-then-del"):
        rec = published[variant]
        stall, resume = event(rec, "A", "stall"), event(rec, "A", "resume")
        assert stall["how"] == "SIGSTOP" and stall["process_state"] in ("T", "t")
        assert resume["frozen_ms"] >= SCENARIO.params["pause_ms"] - stall["t_ms"] - 5
        with pytest.raises(ProcessLookupError):
            os.kill(stall["pid"], 0)


async def test_timeline_belief_versus_redis(published: Records) -> None:
    """A believes it holds for the whole pause; Redis drops its token at the TTL, by expiry."""
    rec = published["fixed"]
    (belief,), (lease,) = spans(rec, "A", "belief"), spans(rec, "A", "redis")
    assert belief["end_ms"] >= SCENARIO.params["pause_ms"]
    assert lease["ended"] == "expired"
    assert lease["end_ms"] - event(rec, "A", "got lock")["t_ms"] == pytest.approx(
        TTL_MS, abs=EXPIRY_SLACK_MS
    )
    buf = io.StringIO()
    render(Console(file=buf, width=100, color_system=None), rec)
    rows = [line.split()[:2] for line in buf.getvalue().splitlines()]
    assert ["A", "belief"] in rows and ["A", "redis"] in rows and ["B", "redis"] in rows


async def test_get_then_del_deletes_the_new_holders_lock(published: Records) -> None:
    """DL-12: A's GET sees its token, the lease expires and B takes it, then A's DEL removes B's."""
    rec = published["buggy-get-then-del"]
    get, b_got, rel = (
        event(rec, "A", "GET"),
        event(rec, "B", "got lock"),
        event(rec, "A", "release"),
    )
    assert get["mine"] and get["t_ms"] < b_got["t_ms"] < rel["t_ms"] and rel["result"] == 1
    assert event(rec, "C", "got lock")["fence"] == 3
    assert spans(rec, "B", "redis")[0]["ended"] == "deleted by A"


async def test_killed_holder_blocks_for_the_ttl(published: Records) -> None:
    """DL-13: a killed A never releases; its token stays until the TTL runs out, then B gets in."""
    rec = published["holder-killed"]
    (lease,) = spans(rec, "A", "redis")
    assert rec["outcomes"] == {"wrote": 1, "lock_busy": 1, "killed": 1}
    assert lease["ended"] == "expired" and "release" not in {
        e["event"] for e in rec["trace"] if e["who"] == "A"
    }
    lasted = lease["end_ms"] - event(rec, "A", "got lock")["t_ms"]
    assert lasted == pytest.approx(TTL_MS, abs=EXPIRY_SLACK_MS)
    assert lease["end_ms"] > event(rec, "A", "killed")["t_ms"]
    assert event(rec, "B", "got lock")["t_ms"] >= lease["end_ms"]


async def test_sleep_mode_gives_the_same_trace(run_scenario: RunFn) -> None:
    """pause_mode=sleep (A awaits in the lab's loop) reproduces the same two traces."""
    records = await run_scenario(SCENARIO, ["buggy", "fixed"], params={"pause_mode": "sleep"})
    assert steps(records["buggy"]) == PUBLISHED_DEL
    assert steps(records["fixed"]) == PUBLISHED_CAD
    assert event(records["fixed"], "A", "stall")["how"].startswith("await")
    assert_all_held([c for r in records.values() for c in r["claims"]])


async def test_longer_ttl_still_overlaps(run_scenario: RunFn) -> None:
    """DL-13: TTL 1000 ms and a 1200 ms pause: the overlap and the fencing are the same."""
    rec = (await run_scenario(SCENARIO, ["fixed"], params=SCENARIO.cases["ttl-1000"]))["fixed"]
    assert steps(rec) == PUBLISHED_CAD
    assert_all_held(rec["claims"])
    assert rec["evidence"]["final_row"]["body"] == "from B"


async def test_ttl_above_the_pause_avoids_this_overlap(run_scenario: RunFn) -> None:
    """DL-13: with the TTL above the pause B finds A's lock busy; no one overlaps this time."""
    params = SCENARIO.cases["ttl-above-pause"]
    records = await run_scenario(SCENARIO, ["fixed", "holder-killed"], params=params)
    rec = records["fixed"]
    assert steps(rec) == [("A", "got lock", 1), ("B", "lock busy", None), ("A", "release", 1),
                          ("C", "got lock", 2), ("C", "release", 1)]  # fmt: skip
    assert [e["event"] for e in records["holder-killed"]["trace"] if e["who"] == "B"] == [
        "lock busy"  # A is dead, yet its lease keeps B out
    ]
    verdicts = [c for r in records.values() for c in r["claims"]]
    assert {c["id"] for c in verdicts} == {"DL-13"}  # the claims made for this case
    assert_all_held(verdicts)
    left = [
        c["why"] for r in records.values() for c in r["claims_not_judged"] if c["id"] == "DL-11"
    ]
    assert any(why.startswith("about other settings") for why in left)  # about the defaults


async def test_bad_pause_mode_is_one_clear_error(run_scenario: RunFn) -> None:
    """An unknown pause_mode is the user's error, named, before any worker starts."""
    with pytest.raises(LabError, match="pause_mode='freeze'"):
        await run_scenario(SCENARIO, ["fixed"], params={"pause_mode": "freeze"})
