"""--procs: actors sharded over worker processes, released together, merged into one record."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from lab.core.knobs import Knobs, start_offsets
from lab.core.scenario import Env, Scenario
from lab.errors import ScenarioFailure
from lab.load.plan import RunPlan
from lab.load.runner import run_plan
from lab.load.shard import deal
from lab.procs import forkserver
from lab.servers import Servers

ARRIVAL = "stagger:20ms"
DIE_AT = 3  # the actor whose worker process dies in the dying variant


async def counted(env: Env, conn: Any, actor: int) -> str:
    env.add(f"actor-{actor}")
    env.add("max_seen", 0)
    env.sample("start_ms", env.now_ms())
    env.extra_evidence.setdefault("pids", []).append(os.getpid())
    return "ok"


async def dying(env: Env, conn: Any, actor: int) -> str:
    if actor == DIE_AT:
        os.kill(os.getpid(), signal.SIGKILL)  # the process dies mid-run, no goodbye
    return "ok"


SCENARIO = Scenario(
    id="shard-test",
    doc="Actors that count themselves, or whose worker dies.",
    kind="actors",
    variants={"counted": counted, "dying": dying},
    outcomes=("ok",),
    uses=frozenset(),
)


def _plan(variant: str, n: int, procs: int) -> RunPlan:
    knobs = Knobs(n, ARRIVAL, "per-actor", 1000, 1, 30.0, 60.0, procs=procs)
    return RunPlan(SCENARIO, [variant], knobs, {}, "shardtest", write=False)


def _children() -> list[int]:
    """PIDs of this test process's children that run lab.load.shard, or of its fork servers'."""
    parents = {os.getpid(), *(s.pid for s in forkserver._servers.values())}
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid in parents and b"lab.load.shard" in cmdline:
            found.append(int(stat.parent.name))
    return found


def test_deal_gives_every_actor_to_one_worker() -> None:
    """Round robin: each index once, every worker a share of the whole arrival."""
    shards = deal(10, 3)
    assert shards == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert sorted(i for s in shards for i in s) == list(range(10))


async def test_every_actor_ends_once_across_processes(servers: Servers) -> None:
    """9 actors over 3 workers: outcomes and counters add up, each actor counted once, the
    stagger keeps its global offsets, and the record says 3 processes ran them."""
    n = 9
    (rec,) = await run_plan(_plan("counted", n, 3), servers)
    assert rec["outcomes"] == {"ok": n}
    assert all(rec["counters"][f"actor-{i}"] == 1 for i in range(n))
    assert rec["load"]["procs"] == 3 and sum(w["actors"] for w in rec["load"]["workers"]) == n
    assert len(set(rec["evidence"]["pids"])) == 3 and os.getpid() not in rec["evidence"]["pids"]
    assert forkserver.fallbacks == 0  # forked by the fork server, as they are by default
    starts = sorted(rec["samples"]["start_ms"][k] for k in ("min", "max"))
    offsets = start_offsets(ARRIVAL, n, 1)
    assert starts[0] >= 0 and starts[1] >= offsets[-1] * 1000 - 1  # the last one waited its turn
    assert not _children()


async def test_a_dying_worker_fails_the_run_and_leaves_nothing(servers: Servers) -> None:
    """A worker killed mid-run: one ScenarioFailure line naming it; no worker left running."""
    with pytest.raises(ScenarioFailure) as failed:
        await run_plan(_plan("dying", 6, 2), servers)
    line = str(failed.value)
    assert "\n" not in line
    assert "shard-test / dying: worker 1 (pid" in line and "died with signal 9" in line
    assert not _children()


@pytest.mark.parametrize(
    ("spec", "want"), [("auto", 0), ("1", 1), ("4", 4), ("0", None), ("two", None), ("-2", None)]
)
def test_procs_takes_auto_or_a_count(spec: str, want: int | None) -> None:
    """--procs: auto or a number >= 1; anything else is one clear error."""
    from lab.cli import parse_procs
    from lab.errors import LabError

    if want is None:
        with pytest.raises(LabError, match="--procs"):
            parse_procs(spec)
    else:
        assert parse_procs(spec) == want


def test_auto_procs_follows_the_scenario() -> None:
    """auto: one process unless the scenario asks for workers; then one per its share, at
    most its processes per core; a given K is kept (never more than the actors)."""
    from lab.load.shard import resolve_procs
    from scenarios.cache_stampede import SCENARIO as STAMPEDE

    def knobs(n: int, procs: int = 0) -> Knobs:
        return Knobs(n, "burst", "per-actor", 1000, 1, 30.0, 60.0, procs=procs)

    assert resolve_procs(SCENARIO, knobs(5000)) == 1
    assert resolve_procs(STAMPEDE, knobs(500)) == 1  # 625 waiters a process
    assert resolve_procs(STAMPEDE, knobs(1000)) == 2
    assert resolve_procs(STAMPEDE, knobs(5000)) == min(4 * (os.cpu_count() or 1), 8)
    assert resolve_procs(SCENARIO, knobs(5, procs=3)) == 3
    assert resolve_procs(SCENARIO, knobs(2, procs=3)) == 2
