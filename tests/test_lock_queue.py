"""lock-queue on real servers: SELECTs queue behind a waiting ALTER; lock_timeout prevents it.

The order is the subject: the sequencer grants the canonical schedule `queue` and the
server reports who waits. tests/test_pinned.py diffs the golden transcripts; here the
evidence the dba session read, the claims judged on it, and the run that replays it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lab.core.records import Record
from lab.errors import LabError
from lab.pinned import PinnedResult, expected_dir, explore, trace
from lab.servers import Servers
from scenarios.lock_queue import SCENARIO
from scenarios.lock_queue.claims import PUBLISHED_TREE, READERS, SCHEDULE
from scenarios.lock_queue.lock_queue import ALTER_SQL, READ_SQL, ROOT_SQL
from tests.conftest import RunFn

RC = "read_committed"


@pytest.fixture(scope="module")
def runs(servers: Servers) -> dict[str, PinnedResult]:
    """Both variants' canonical schedule, traced once for the module."""
    import asyncio

    assert SCENARIO.pinned is not None
    plan = [(v, SCHEDULE, SCENARIO.pinned.schedules[v][SCHEDULE]) for v in ("buggy", "fixed")]
    results = asyncio.run(trace(SCENARIO, servers, plan, [RC], run_id="test", deadlock_ms=1000))
    return {r.variant: r for r in results}


def judged(variant: str, run: PinnedResult) -> dict[str, tuple[bool, str]]:
    """`variant`'s explore claims judged on `run`, as verify judges them on explore's."""
    record: dict[str, Record] = {
        variant: {"by_isolation": {RC: {"canonical": {SCHEDULE: run.to_json()}}}}
    }
    out = {}
    for c in SCENARIO.claims:
        if c.explore and c.variants == (variant,):
            verdict = c.check(record)
            assert verdict is not None
            out[c.text] = verdict
    return out


def tree(run: PinnedResult) -> dict[str, dict[str, Any]]:
    return {r["who"]: r for r in run.evidence["tree"]}


def test_registered_with_the_published_tree() -> None:
    """The scenario is in the catalogue; its claims carry the published blocking tree."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    assert "8123 | {}         | idle in transaction | 00:14:02" in PUBLISHED_TREE
    assert "8400 | {8305}     | active" in PUBLISHED_TREE
    assert "blocked_by rỗng" in SCENARIO.section("Published")
    assert {c.id for c in SCENARIO.claims} == {"LC-9", "LC-10"}


def test_buggy_tree_rooted_at_the_idle_transaction(runs: dict[str, PinnedResult]) -> None:
    """LC-10: root idle in transaction <- ALTER <- every SELECT; terminating the root frees all."""
    run = runs["buggy"]
    t = tree(run)
    assert t["root"]["blocked_by"] == [] and t["root"]["state"] == "idle in transaction"
    assert t["root"]["query"] == ROOT_SQL
    assert "root" in t["ddl"]["blocked_by"] and t["ddl"]["query"] == ALTER_SQL
    for r in READERS:
        assert t[r]["blocked_by"] == ["ddl"] and t[r]["query"] == READ_SQL
        assert f"{r} read" in run.waited
    assert run.evidence["terminate"] == [{"who": "root", "terminated": True}]
    assert run.evidence["after"] == []
    assert SCENARIO.pinned is not None
    assert run.outcomes == {**dict.fromkeys(SCENARIO.pinned.sessions, "ok"), "root": "idle"}
    verdicts = judged("buggy", run)
    assert len(verdicts) == 4 and all(held for held, _ in verdicts.values()), verdicts


def test_fixed_alter_gives_up_and_selects_never_queue(runs: dict[str, PinnedResult]) -> None:
    """With lock_timeout the ALTER fails with 55P03; the SELECTs finish while the root is open."""
    run = runs["fixed"]
    assert run.outcomes["ddl"] == "55P03"
    assert not {f"{r} read" for r in READERS} & set(run.waited)
    assert list(tree(run)) == ["root", "upd"]
    assert run.kept, run.checks
    verdicts = judged("fixed", run)
    assert len(verdicts) == 4 and all(held for held, _ in verdicts.values()), verdicts


def test_dml_beside_dml_on_one_table(runs: dict[str, PinnedResult]) -> None:
    """LC-9: two UPDATEs of orders hold ROW EXCLUSIVE at once, beside the root's ROW SHARE."""
    for run in runs.values():
        granted = sorted((r["who"], r["mode"]) for r in run.evidence["locks"] if r["granted"])
        assert granted == [("dml1", "RowExclusiveLock"), ("dml2", "RowExclusiveLock"), ("root", "RowShareLock")]  # fmt: skip
        assert not {"dml1 update", "dml2 update"} & set(run.waited)


def test_each_variants_claims_fail_on_the_other_run(runs: dict[str, PinnedResult]) -> None:
    """The claims can fail: the buggy queue is not seen in the fixed run, nor the fixed
    ALTER's 55P03 in the buggy one."""
    swapped = {v: judged(v, runs["fixed" if v == "buggy" else "buggy"]) for v in ("buggy", "fixed")}
    assert not swapped["buggy"]["buggy: every new SELECT queues behind the ALTER, which waits for the idle transaction"][0]  # fmt: skip
    assert not swapped["fixed"]["fixed: with lock_timeout the ALTER fails with 55P03 and the SELECTs never queue"][0]  # fmt: skip


async def test_a_run_replays_the_canonical_schedule(run_scenario: RunFn) -> None:
    """`locklab run` is the same schedule: its transcript has the golden file's step lines,
    the outcomes are counted and the invariants hold (aligned without the invariant lines)."""
    records = await run_scenario(SCENARIO)
    for v, rec in records.items():
        golden = (expected_dir(SCENARIO) / f"{v}.{SCHEDULE}.out").read_text().splitlines()
        lines = [" ".join(x.split()) for x in rec["evidence"]["transcript"].splitlines()]
        steps = [" ".join(x.split()) for x in golden if not x.startswith("invariant")]
        assert lines[1:] == steps[1:], v  # the same lines; only the header and widths differ
        assert all(i["held"] for i in rec["invariants"]), rec["invariants"]
    assert records["buggy"]["outcomes"] == {"ok": 8, "idle": 1}
    assert records["fixed"]["outcomes"] == {"ok": 7, "55P03": 1, "idle": 1}


async def test_explore_runs_the_canonical_schedules_only(servers: Servers) -> None:
    """Explore of nine sessions runs each variant's canonical schedule and nothing else (its
    record says so), and every explore claim holds on that record."""
    plan = {v: [RC] for v in ("buggy", "fixed")}
    record = await explore(SCENARIO, servers, plan, run_id="test", deadlock_ms=1000)
    for v in plan:
        cell = record["variants"][v]["by_isolation"][RC]
        assert cell["canonical_only"] and cell["ran"] == cell["interleavings"] == 1
        assert list(cell["canonical"]) == [SCHEDULE]
    explored = [c for c in SCENARIO.claims if c.explore]
    verdicts = {c.text: c.check(record["variants"]) for c in explored}
    assert len(verdicts) == 8 and all(v and v[0] for v in verdicts.values()), verdicts


async def test_no_lock_timeout_is_refused(run_scenario: RunFn) -> None:
    """ddl_lock_timeout_ms=0 (PostgreSQL's "wait forever") is refused: one clear line."""
    with pytest.raises(LabError, match=r"ddl_lock_timeout_ms=0: at least 1 ms"):
        await run_scenario(SCENARIO, ["fixed"], params={"ddl_lock_timeout_ms": 0})


def test_golden_files_exist() -> None:
    """Each variant's canonical schedule has its expected transcript beside the code."""
    assert {p.name for p in Path(expected_dir(SCENARIO)).glob("*.out")} == {
        "buggy.queue.out",
        "fixed.queue.out",
    }
