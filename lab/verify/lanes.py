"""`locklab verify`'s runs side by side, in lane processes that run one job at a time.

A job is one (scenario, case) of verify's plan with all its trials (lab.verify's
``verify_scenario``), or one part of a scenario's explore (``explore_parts``). The lab
starts ``lanes`` worker processes (lab.procs.workers: the config in, one JSON object per job, they
die with the lab), hands each free lane the first job that may run now, and merges what
they send back into the verdicts a sequential verify would have made: the same records,
the same judging, in the plan's order.

What may run beside what. Every run has a database and a Redis key prefix of its own, and a
record's PostgreSQL evidence (pg_stat_database, the log's deadlock reports) is read for its
database only; explores force their orders by what the server reports, not by time. Three
things are shared, and the scheduler keeps them apart:

- Redis's counters (INFO commandstats) are server-wide, and every run that uses Redis keeps
  their delta in its record: one job of a scenario that uses Redis at a time (its explore
  keeps no counters, but its commands would land in another run's);
- PostgreSQL's connections: the runs at once need no more than the server accepts;
- the machine and the server as a whole: a case the scenario names in ``Scenario.alone``
  (its claims are about what this machine can do, e.g. a client's GET rate, or read a
  server-wide figure, e.g. the WAL position) runs with nothing beside it;
  a case it names in ``Scenario.timed`` (real time: a pause against a TTL) runs beside
  other timed cases only, which mostly wait, never beside the CPU-bound runs.

When the lab started Redis itself, each lane gets a Redis server of its own (the same
build, started beside the first): then Redis's counters are each lane's own, and runs
that use Redis go side by side like any other.

Processes, not tasks of one event loop, so that two lanes use both cores. A lane runs its
jobs with the same code and the same asyncio loop as the lab's own process would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from secrets import token_urlsafe
from typing import Any

from lab.aio import within
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.procs.workers import Event, Worker, WorkerError, next_of
from lab.servers import Servers
from lab.servers.base import PgServer, RedisServer, ServerInfo
from lab.verify.jobs import Job, order, past_seconds, pick

# Lanes a quick verify runs on when not told (`--lanes auto`): the whole quick catalogue on
# this 2-core machine, idle, no servers kept (docs/load.md): 5 lanes 37.5 / 40.1 / 40.0 s,
# 6 lanes 35.7 / 36.9 / 36.4 s, all claims held in each. (Before the run databases were
# copied with FILE_COPY the catalogue was CPU-bound: 6 lanes were no faster than 5, and
# the timing claim DL-5 was not held once.)
QUICK_LANES = 6
CONNECTION_RESERVE = 10  # left free for the lab's own probes and anything else on the server
JOB_S = 3600.0  # one job's bound: its own run timeouts end it long before
STOP_WAIT_S = 30.0  # for a lane to drop its spare database and exit once told to stop
DROP_S = 30.0  # for the databases a killed lane left
CHILD = Path(__file__).with_name("lane_child.py")


def lane_redis(servers: Servers, count: int, own: Servers) -> list[RedisServer]:
    """`count` more Redis servers of the lab's own build, for lanes of their own (stopped
    by `own.close()`); none when the lab's Redis is not one it runs (a user's, Docker's)
    or the build found now is another."""
    main = servers.redis
    if main is None or main.info.kind != "embedded" or count < 1:
        return []
    from lab.servers.embedded import EmbeddedRedis, make_base_dir, remove_base_dir

    base = make_base_dir()
    own.stops.append(lambda: remove_base_dir(base))
    first = EmbeddedRedis.create(base, name="lane-2")  # finds the binary and its version once
    if (first.source, first.version) != (main.info.source, main.info.version):
        return []  # lanes share the lab's Redis, one Redis run at a time
    out = []
    for i in range(count):
        redis = (
            first
            if i == 0
            else replace(first, name=f"lane-{i + 2}", port=0, pid=0, password=token_urlsafe(24))
        )
        own.stops.append(redis.stop)
        redis.start()
        out.append(redis.server())
    return out


def servers_json(
    servers: Servers, redis_server: RedisServer | None = None
) -> dict[str, Any] | None:
    """What a lane needs to reach the same servers (with `redis_server` for the lab's
    Redis); None when they cannot be handed over (a Docker server's log is read through
    the lab's own Docker client)."""
    pg, redis = servers.pg, redis_server or servers.redis
    if pg is not None and pg.logs is not None:
        return None
    return {
        "pg": None
        if pg is None
        else {
            "info": pg.info.to_json(),
            "dsn": pg.dsn,
            "max_connections": pg.max_connections,
            "log_path": str(pg.log_path) if pg.log_path else None,
            "bindir": str(pg.bindir) if pg.bindir else None,
            "pid": pg.pid,
        },
        "redis": None
        if redis is None
        else {
            "info": redis.info.to_json(),
            "url": redis.url,
            "pid": redis.pid,
        },
        "pgbouncer": dict(servers.pgbouncer),
        "pgbouncer_info": servers.pgbouncer_info.to_json() if servers.pgbouncer_info else None,
    }


def servers_from(data: Mapping[str, Any]) -> Servers:
    """The Servers of `servers_json`: the same servers, none of them this process's to stop."""
    pg, redis, bouncer = data["pg"], data["redis"], data["pgbouncer_info"]
    return Servers(
        pg=None
        if pg is None
        else PgServer(
            info=ServerInfo(**pg["info"]),
            dsn=pg["dsn"],
            max_connections=pg["max_connections"],
            log_path=Path(pg["log_path"]) if pg["log_path"] else None,
            bindir=Path(pg["bindir"]) if pg["bindir"] else None,
            pid=pg["pid"],
        ),
        redis=None
        if redis is None
        else RedisServer(ServerInfo(**redis["info"]), redis["url"], pid=redis["pid"]),
        pgbouncer=dict(data["pgbouncer"]),
        pgbouncer_info=ServerInfo(**bouncer) if bouncer else None,
    )


def parse_lanes(asked: str, profile: str) -> int:
    """`--lanes`: auto (quick: QUICK_LANES; published, whose claims compare times with the
    documents': 1, the lab's own process) or a whole number >= 1."""
    if asked == "auto":
        return QUICK_LANES if profile == "quick" else 1
    try:
        want = int(asked)
    except ValueError:
        raise LabError(f"--lanes {asked}: auto or a whole number") from None
    if want < 1:
        raise LabError(f"--lanes {asked}: must be at least 1")
    return want


def lanes_for(want: int, scenarios: Sequence[Scenario], servers: Servers) -> tuple[int, str]:
    """How many lanes of the `want`ed can run (1: in the lab's own process) and, when
    fewer, why."""
    if want == 1:
        return 1, ""
    from scenarios import by_id

    catalogue = by_id()
    if any(catalogue.get(sc.id) is not sc for sc in scenarios):
        return 1, "a scenario from a file runs in the lab's own process"
    if servers_json(servers) is None:
        return 1, "Docker servers' logs are read by the lab's own process"
    return want, ""


async def run_lanes(
    jobs: Sequence[Job],
    lanes: int,
    servers: Servers,
    *,
    profile: str,
    run_id: str,
    seed: int,
    trials: int | None,
    write: bool,
    on_step: Callable[[str], None] | None = None,
    schedule: list[dict[str, Any]] | None = None,
    counterfactual: bool = False,
) -> list[Any]:
    """Run `jobs` on `lanes` lane processes; the ScenarioVerdicts in verify's order (loads
    in the plan's order, then each scenario's explore). LabError (bad input, a server
    gone, a lane that died) stops them all. `schedule` gets, per job, its lane and when it
    started and ended (seconds since the lanes were ready)."""
    from lab.verify import ScenarioVerdicts, explore_failed, judge_explore

    scenario_of = {j.scenario.id: j.scenario for j in jobs}
    from lab.core.results import results_root
    from lab.load.databases import drop_run_databases
    from lab.procs import lifecycle

    free = (servers.pg.max_connections if servers.pg else 10**6) - CONNECTION_RESERVE
    folder = lifecycle.folder_of(lifecycle.make_base_dir())  # swept if the lab is killed
    outdir = folder / "lanes"
    outdir.mkdir()
    config = {
        "servers": servers_json(servers),
        "profile": profile,
        "run_id": run_id,
        "seed": seed,
        "trials": trials,
        "write": write,
        "outdir": str(outdir),
        "counterfactual": counterfactual,
        # a lane runs in a lab folder of its own: the records go where the lab's would
        "results": str(results_root().resolve()),
    }
    workers: list[Worker] = []
    own = Servers()  # the lanes' own Redis servers
    loads: dict[int, ScenarioVerdicts] = {}
    parts: dict[str, dict[int, dict[str, Any]]] = {}
    errors: dict[str, str] = {}
    sent: dict[str, float] = {}
    done_at: dict[str, float] = {}
    need_parts = {j.scenario.id: 0 for j in jobs if j.part >= 0}
    for j in jobs:
        if j.part >= 0:
            need_parts[j.scenario.id] += 1
    # SIGTERM as a cancel of this task, so the lanes are stopped and reaped below whatever
    # the loop was doing (Ctrl-C is already that: asyncio.run cancels the main task)
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    terminated: list[bool] = []
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm() -> None:
        terminated.append(True)
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    own_redis: list[RedisServer] = []
    try:
        count = min(lanes, len(jobs))
        if count > 1 and any(j.redis for j in jobs):
            own_redis = lane_redis(servers, count - 1, own)
        for i in range(count):
            cfg = config
            if own_redis and i > 0:  # lane 1 keeps the lab's own
                cfg = {**config, "servers": servers_json(servers, own_redis[i - 1])}
            workers.append(await Worker.spawn(CHILD, cfg, name=f"lane {i + 1}", ready_s=None))
        for w in workers:
            await w.wait_for("ready")
        queue = order(jobs, past_seconds(profile))
        busy: dict[Worker, Job] = {}
        t0 = time.perf_counter()
        began: dict[int, float] = {}
        while queue or busy:
            for w in workers:
                if w in busy:
                    continue
                job = pick(queue, list(busy.values()), free, shared_redis=not own_redis)
                if job is None:
                    break
                queue.remove(job)
                busy[w] = job
                began[job.index] = time.perf_counter()
                sent.setdefault(job.scenario.id, began[job.index])
                w.send({"job": job.to_json()}, f"job {job.name}")
            w, ev = await next_of(list(busy), JOB_S, skip=("ready",))
            if ev.name == "progress":
                if on_step is not None:
                    on_step(str(ev.fields["text"]))
                continue
            job = busy.pop(w)
            if schedule is not None:
                schedule.append(
                    {
                        "job": job.key,
                        "lane": workers.index(w) + 1,
                        "start_s": round(began[job.index] - t0, 2),
                        "end_s": round(time.perf_counter() - t0, 2),
                    }
                )
            if ev.name == "refused":
                raise LabError(str(ev.fields["error"]))
            if ev.name != "done":
                raise LabError(
                    f"verify {w.name} (pid {w.pid}) failed during {job.name}: {_why(ev, w)}"
                )
            payload = _take(Path(str(ev.fields["path"])))
            sid = job.scenario.id
            if job.part < 0:
                res = ScenarioVerdicts.from_json(payload["verdicts"])
                res.records = payload["records"]
                loads[job.index] = res
                continue
            if "error" in payload:
                errors.setdefault(sid, str(payload["error"]))
            else:
                parts.setdefault(sid, {})[job.part] = payload["record"]
            need_parts[sid] -= 1
            if need_parts[sid] == 0:
                done_at[sid] = time.perf_counter()
                if on_step is not None:
                    on_step(f"{sid}: explore done")
        for w in workers:
            w.send({"stop": True}, "stop")
        for w in workers:
            await w.wait_for("returned", STOP_WAIT_S)
    except WorkerError as exc:
        raise LabError(f"verify lanes: {exc}") from None
    except asyncio.CancelledError:
        if terminated:
            raise KeyboardInterrupt from None  # the command's "interrupted" line, exit 130
        raise
    finally:
        for w in workers:
            w.terminate()  # a lane still at work drops its databases, then exits
        for w in workers:
            await _reap(w)
        # what a lane killed mid-run could not drop (each drops its own otherwise)
        with contextlib.suppress(Exception):
            await within(drop_run_databases(servers, run_id), DROP_S)
        lifecycle.remove_folder(folder)
        own.close()
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, previous)
    out: list[Any] = [loads[i] for i in sorted(loads)]
    for sid in need_parts:
        sc = scenario_of[sid]
        if sid in errors:
            out.append(explore_failed(sc, profile, errors[sid]))
            continue
        got = parts[sid]
        wall = done_at[sid] - sent[sid]
        out.append(
            judge_explore(sc, profile, [got[i] for i in sorted(got)], write=write, wall_s=wall)
        )
    return out


def put_json(path: Path, payload: Mapping[str, Any]) -> Path:
    """A job's result, whole or not at all (a pipe line would cap its size)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, default=str))
    tmp.replace(path)
    return path


def _take(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    path.unlink()
    return data


def _why(ev: Event, w: Worker) -> str:
    if ev.name == "error":
        return str(ev.fields.get("error"))
    return f"it ended ({w.status()})"


async def _reap(w: Worker) -> None:
    """Give a terminated lane a moment to clean up, then close it (SIGKILL if still there)."""
    with contextlib.suppress(TimeoutError):
        await within(w.proc.wait(), 5.0)
    await w.close()
