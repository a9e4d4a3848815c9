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
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from secrets import token_urlsafe
from typing import Any

from lab.aio import within
from lab.core.profiles import QUICK, Profile
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.procs.workers import Event, Worker, WorkerError, next_of
from lab.servers import Servers
from lab.servers.base import PgServer, RedisServer, ServerInfo
from lab.verify.explore import explore_failed, judge_explore
from lab.verify.jobs import Job, order, past_seconds, pick
from lab.verify.judge import ScenarioVerdicts

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


def parse_lanes(asked: str, profile: Profile) -> int:
    """`--lanes`: auto (quick: QUICK_LANES; published, whose claims compare times with the
    documents': 1, the lab's own process) or a whole number >= 1."""
    if asked == "auto":
        return QUICK_LANES if profile == QUICK else 1
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
    profile: Profile,
    run_id: str,
    seed: int,
    trials: int | None,
    write: bool,
    on_step: Callable[[str], None] | None = None,
    schedule: list[dict[str, Any]] | None = None,
    counterfactual: bool = False,
) -> list[ScenarioVerdicts]:
    """Run `jobs` on `lanes` lane processes; the ScenarioVerdicts in verify's order (loads
    in the plan's order, then each scenario's explore). LabError (bad input, a server
    gone, a lane that died) stops them all. `schedule` gets, per job, its lane and when it
    started and ended (seconds since the lanes were ready)."""
    from lab.core.results import results_root
    from lab.procs import lifecycle

    free = (servers.pg.max_connections if servers.pg else 10**6) - CONNECTION_RESERVE
    folder = lifecycle.folder_of(lifecycle.make_base_dir())  # swept if the lab is killed
    outdir = folder / "lanes"
    outdir.mkdir()
    config = {
        "servers": servers_json(servers),
        "profile": profile.name,
        "run_id": run_id,
        "seed": seed,
        "trials": trials,
        "write": write,
        "outdir": str(outdir),
        "counterfactual": counterfactual,
        # a lane runs in a lab folder of its own: the records go where the lab's would
        "results": str(results_root().resolve()),
    }
    pool = _Lanes(servers)
    returned = _Returned(jobs, on_step)
    with _sigterm_cancels_this_task() as terminated:
        try:
            await pool.start(config, min(lanes, len(jobs)), any(j.redis for j in jobs))
            queue = order(jobs, past_seconds(profile))
            dispatch = _Dispatch(pool.workers, queue, free, shared_redis=not pool.own_redis)
            await _run_jobs(dispatch, returned, schedule)
            await pool.stop()
        except WorkerError as exc:
            raise LabError(f"verify lanes: {exc}") from None
        except asyncio.CancelledError:
            if terminated:
                raise KeyboardInterrupt from None  # the command's "interrupted" line, exit 130
            raise
        finally:
            await _clean_up(pool, servers, run_id, folder)
    return returned.verdicts(profile, write)


@contextlib.contextmanager
def _sigterm_cancels_this_task() -> Iterator[list[bool]]:
    """SIGTERM as a cancel of the running task, so the lanes are stopped and reaped whatever
    the loop was doing (Ctrl-C is already that: asyncio.run cancels the main task); the
    list it gives is not empty once SIGTERM came."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    assert task is not None
    terminated: list[bool] = []
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm() -> None:
        terminated.append(True)
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        yield terminated
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, previous)


@dataclass
class _Lanes:
    """The lane processes, and the Redis servers of their own (stopped by `own.close()`)."""

    servers: Servers
    workers: list[Worker] = field(default_factory=list)
    own: Servers = field(default_factory=Servers)
    own_redis: list[RedisServer] = field(default_factory=list)

    async def start(self, config: Mapping[str, Any], count: int, redis_jobs: bool) -> None:
        """`count` lanes, each ready for a job; past the first, each on a Redis of its own
        when jobs use Redis and the lab can start one (`lane_redis`)."""
        if count > 1 and redis_jobs:
            self.own_redis = lane_redis(self.servers, count - 1, self.own)
        for i in range(count):
            cfg = config
            if self.own_redis and i > 0:  # lane 1 keeps the lab's own
                cfg = {**config, "servers": servers_json(self.servers, self.own_redis[i - 1])}
            self.workers.append(await Worker.spawn(CHILD, cfg, name=f"lane {i + 1}", ready_s=None))
        for w in self.workers:
            await w.wait_for("ready")

    async def stop(self) -> None:
        """Tell every lane to stop, and wait for each to drop its spare database and exit."""
        for w in self.workers:
            w.send({"stop": True}, "stop")
        for w in self.workers:
            await w.wait_for("returned", STOP_WAIT_S)

    async def end(self) -> None:
        """Terminate every lane (one still at work drops its databases, then exits) and
        reap it."""
        for w in self.workers:
            w.terminate()
        for w in self.workers:
            await _reap(w)


@dataclass
class _Dispatch:
    """Which lane runs which job, and when each job began (perf_counter)."""

    workers: list[Worker]
    queue: list[Job]  # the jobs not handed out yet, in the order they go
    free: int  # PostgreSQL connections the runs at once may take
    shared_redis: bool  # the lanes share the lab's Redis
    busy: dict[Worker, Job] = field(default_factory=dict)
    began: dict[int, float] = field(default_factory=dict)  # by job index
    t0: float = field(default_factory=time.perf_counter)  # the lanes were ready

    def hand_out(self) -> list[Job]:
        """Give each free lane the first job that may run beside the busy ones; the jobs
        handed out."""
        handed: list[Job] = []
        for w in self.workers:
            if w in self.busy:
                continue
            job = pick(
                self.queue, list(self.busy.values()), self.free, shared_redis=self.shared_redis
            )
            if job is None:
                break
            self.queue.remove(job)
            self.busy[w] = job
            self.began[job.index] = time.perf_counter()
            handed.append(job)
            w.send({"job": job.to_json()}, f"job {job.name}")
        return handed

    def finished(self, w: Worker) -> tuple[Job, dict[str, Any]]:
        """The job lane `w` ran, now free, and its entry in the schedule."""
        job = self.busy.pop(w)
        return job, {
            "job": job.key,
            "lane": self.workers.index(w) + 1,
            "start_s": round(self.began[job.index] - self.t0, 2),
            "end_s": round(time.perf_counter() - self.t0, 2),
        }


@dataclass
class _Returned:
    """What the lanes sent back, merged into verify's verdicts: each load's, and each
    scenario's explore from its parts."""

    jobs: Sequence[Job]
    on_step: Callable[[str], None] | None
    loads: dict[int, ScenarioVerdicts] = field(default_factory=dict)  # by job index
    parts: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # an explore's first failed part
    sent: dict[str, float] = field(default_factory=dict)  # a scenario's first job went out
    done_at: dict[str, float] = field(default_factory=dict)  # its explore's last part came
    need_parts: dict[str, int] = field(init=False)  # explore parts still out, by scenario

    def __post_init__(self) -> None:
        self.need_parts = dict(Counter(j.scenario.id for j in self.jobs if j.part >= 0))

    def progress(self, text: str) -> None:
        """A line for the progress display."""
        if self.on_step is not None:
            self.on_step(text)

    def take(self, job: Job, payload: Mapping[str, Any]) -> None:
        """Keep what `job` sent: a load's verdicts, or an explore part's record (or error)."""
        sid = job.scenario.id
        if job.part < 0:
            res = ScenarioVerdicts.from_json(payload["verdicts"])
            res.records = payload["records"]
            self.loads[job.index] = res
            return
        if "error" in payload:
            self.errors.setdefault(sid, str(payload["error"]))
        else:
            self.parts.setdefault(sid, {})[job.part] = payload["record"]
        self.need_parts[sid] -= 1
        if self.need_parts[sid] == 0:
            self.done_at[sid] = time.perf_counter()
            self.progress(f"{sid}: explore done")

    def verdicts(self, profile: Profile, write: bool) -> list[ScenarioVerdicts]:
        """The loads in the plan's order, then each scenario's explore judged whole (its
        wall time from its first job sent to its last part back)."""
        scenario_of = {j.scenario.id: j.scenario for j in self.jobs}
        out = [self.loads[i] for i in sorted(self.loads)]
        for sid in self.need_parts:
            sc = scenario_of[sid]
            if sid in self.errors:
                out.append(explore_failed(sc, profile, self.errors[sid]))
                continue
            got = self.parts[sid]
            wall = self.done_at[sid] - self.sent[sid]
            records = [got[i] for i in sorted(got)]
            out.append(judge_explore(sc, profile, records, write=write, wall_s=wall))
        return out


async def _run_jobs(
    dispatch: _Dispatch, returned: _Returned, schedule: list[dict[str, Any]] | None
) -> None:
    """Hand each free lane the first job that may run now and take back what it sends,
    until every job is back."""
    while dispatch.queue or dispatch.busy:
        for job in dispatch.hand_out():
            returned.sent.setdefault(job.scenario.id, dispatch.began[job.index])
        w, ev = await next_of(list(dispatch.busy), JOB_S, skip=("ready",))
        if ev.name == "progress":
            returned.progress(str(ev.fields["text"]))
            continue
        job, entry = dispatch.finished(w)
        if schedule is not None:
            schedule.append(entry)
        returned.take(job, _result(ev, w, job))


def _result(ev: Event, w: Worker, job: Job) -> dict[str, Any]:
    """What lane `w` sent for `job`; LabError when it refused the job or failed at it."""
    if ev.name == "refused":
        raise LabError(str(ev.fields["error"]))
    if ev.name != "done":
        raise LabError(f"verify {w.name} (pid {w.pid}) failed during {job.name}: {_why(ev, w)}")
    return _take(Path(str(ev.fields["path"])))


async def _clean_up(pool: _Lanes, servers: Servers, run_id: str, folder: Path) -> None:
    """Whatever happened: no lane left, no database of the run, no lab folder, no lane's
    Redis."""
    from lab.load.databases import drop_run_databases
    from lab.procs import lifecycle

    await pool.end()
    # what a lane killed mid-run could not drop (each drops its own otherwise)
    with contextlib.suppress(Exception):
        await within(drop_run_databases(servers, run_id), DROP_S)
    lifecycle.remove_folder(folder)
    pool.own.close()


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
