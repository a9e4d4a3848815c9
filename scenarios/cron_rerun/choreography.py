"""cron-rerun's machinery: the pods as worker processes, the race, the crash, the retry.

One trial, on an empty invoices table; pod-1, pod-2 and the retry are pod.py processes.
  pod-1 connects; pod-2 connects too (pod2_connect=before) or only starts (inside).
  pod-1 is granted "try the lock + k customers"; after customer k it waits: the crash point.
  pod-1 locked -> pod-2 starts: it is granted its job (before), or told to connect and
                  granted its job once connected (inside).
  pod-1 billed k and no lock attempt of pod-2 unanswered -> a snapshot of pod-1's session
                  (LC-3), then SIGKILL by PID.
  The server releases pod-1's lock when its backend sees the connection die (polled).
  pod-2 ends; then the Job's retry connects and runs to the end, alone
                  (retry_connect=before: connected with pod-1, it waits until now).
Every step waits for the event it depends on, never for wall-clock time; whether pod-2
tries the lock before or after the crash is the order in which those steps were granted.
The pods log in as the run's user, or (password_auth) as a throwaway role whose password
has the run's SCRAM iteration count (lab.servers.pgauth), so a login costs what DL-17 measures.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from lab.aio import until
from lab.core.scenario import Env
from lab.errors import ScenarioFailure
from lab.procs import workers
from lab.servers import pgauth
from scenarios.cron_rerun.cron_rerun import PERIOD, Billed, Fix, Job
from scenarios.cron_rerun.trials import COUNTS, p50, summarize

POD = Path(__file__).with_name("pod.py")
EVENT_TIMEOUT_S = 30.0  # a pod silent this long has failed
RELEASE_TIMEOUT_S = 10.0  # the server must notice the killed session within this
RELEASE_POLL_S = 0.001
TRACE_CUSTOMERS = 10  # trace every customer only for small jobs
BEFORE_CRASH, AFTER_CRASH = "before the crash", "after the crash"
SKIP = ("step", "returned")  # the protocol's own events: the choreography reads the job's

AT_CRASH = """
SELECT a.state, a.backend_xid::text AS xid, a.backend_xmin::text AS xmin,
       (extract(epoch FROM clock_timestamp() - a.xact_start) * 1000)::float8 AS xact_open_ms,
       xid(pg_snapshot_xmin(pg_current_snapshot()))::text AS horizon,
       EXISTS (SELECT 1 FROM pg_locks l
               WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted) AS holds_lock
FROM pg_stat_activity a WHERE a.pid = $1
"""
HOLDS_LOCK = "SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory'"


def variant(fix: Fix) -> Callable[[Env], Awaitable[None]]:
    """The variant that runs `fix`'s job through every trial."""

    async def run(env: Env) -> None:
        await cron(env, fix)

    return run


def steps(job: Job) -> int:
    """The grants a whole job takes: the lock, each customer, the end."""
    return job.customers + 2


def _fail(env: Env, what: str) -> ScenarioFailure:
    return ScenarioFailure(f"{env.scenario} / {env.variant}: {what}")


class Pod:
    """One pod: a pod.py process (lab.procs.workers), granted step by step."""

    def __init__(self, env: Env, job: Job, worker: workers.Worker, lazy: bool) -> None:
        self.env, self.job, self.name, self.worker, self.lazy = env, job, job.pod, worker, lazy
        self.backend_pid = 0  # 0 until connected
        self.connect_ms = 0.0

    @classmethod
    async def spawn(cls, env: Env, job: Job, login: Mapping[str, str], *, lazy: bool) -> Pod:
        """Start the process; a `lazy` pod connects only when granted its first step."""
        # The job goes over stdin, so a password never shows in argv or the environment.
        config = {"dsn": env.dsn, "login": dict(login), "job": asdict(job), "lazy": lazy}
        # forked by the fork server (lab/procs/forkserver.py): a process of its own all the same
        worker = await workers.Worker.spawn(POD, config, name=job.pod, ready_s=None, fork=True)
        return cls(env, job, worker, lazy)

    async def started(self) -> None:
        """Wait until the process is up (lazy) or connected."""
        await self.expect("ready")
        if not self.lazy:
            self.connected(await self.expect("connected"))

    def connected(self, ev: Mapping[str, Any]) -> None:
        self.backend_pid, self.connect_ms = ev["backend_pid"], ev["connect_ms"]
        self.env.trace(self.name, "connected", ms=round(self.connect_ms, 2))

    def grant(self, steps: int) -> None:
        """Let the pod take `steps` more steps (connect, lock, one customer each, finish)."""
        for _ in range(steps):
            self.worker.grant("go")

    async def expect(self, *events: str) -> dict[str, Any]:
        ev = _event(await self.worker.next(EVENT_TIMEOUT_S, skip=SKIP))
        if ev["ev"] not in events:
            raise self.unexpected(ev)
        return ev

    def unexpected(self, ev: Mapping[str, Any]) -> ScenarioFailure:
        if ev["ev"] == "exit":
            return _fail(self.env, f"{self.name} exited: {self.worker.status()}")
        return _fail(self.env, f"{self.name}: {ev.get('error') or f'unexpected {ev}'}")


def _event(ev: workers.Event) -> dict[str, Any]:
    return {"ev": ev.name, **ev.fields}


def _trace_event(env: Env, job: Job, ev: Mapping[str, Any]) -> None:
    kind = ev["ev"]
    if kind == "billed" and job.customers <= TRACE_CUSTOMERS:
        what = "billed" if ev["inserted"] else "already billed (conflict, no-op)"
        env.trace(job.pod, what, customer=ev["customer"])
    elif kind == "skipped":
        env.trace(job.pod, "skipped (lock held)")
    elif kind == "done":
        env.trace(job.pod, "done", inserted=ev["inserted"], conflicts=ev["conflicts"])
    elif kind == "locked":
        env.trace(job.pod, "locked")


@contextlib.asynccontextmanager
async def _login(env: Env) -> AsyncIterator[tuple[dict[str, str], str]]:
    """(connect kwargs, auth method) of the pods: the run's user, or a throwaway role with
    its own password and SCRAM iteration count (the method is read from the server)."""
    if not env.params["password_auth"]:
        yield {}, await pgauth.auth_method(env.dsn, env.database)
        return
    grants = ["GRANT SELECT, INSERT ON invoices TO {role}"]
    async with pgauth.throwaway_role(env.db, env.params["scram_iterations"], grants) as login:
        role, password = login
        method = await pgauth.auth_method(env.dsn, env.database, role)
        yield {"user": role, "password": password}, method


@dataclass
class Race:
    """What happened from pod-1's start to both pods being done."""

    locked_at: float | None = None
    pod1_billed: int = 0
    killed_at: float | None = None
    at_crash: dict[str, Any] = field(default_factory=dict)
    pod2_asking: bool = False  # pod-2 was granted its lock attempt and has no answer yet
    pod2_after_crash: bool = False  # ... and that grant came after the SIGKILL
    pod2_result: str = ""  # billed | skipped
    pod2_sent_ms: float = 0.0
    pod2_billed: Billed = field(default_factory=Billed)
    pod2_exited: bool = False
    release: asyncio.Task[float] | None = None  # polls from the SIGKILL on, when pod-2 is done

    @property
    def over(self) -> bool:
        return self.killed_at is not None and self.pod2_exited


async def cron(env: Env, fix: Fix) -> None:
    """Every trial of the run, on one observer connection and one login."""
    observer = await env.connect()
    try:
        for query in (AT_CRASH, HOLDS_LOCK):  # prepared now: one round trip at the crash point
            await observer.fetch(query, 0)
        async with _login(env) as (login, auth):
            results = []
            for trial in range(1, env.params["trials"] + 1):
                try:
                    results.append(await _trial(env, fix, trial, login, observer))
                except (asyncpg.PostgresError, OSError) as exc:
                    code = getattr(exc, "sqlstate", None) or type(exc).__name__
                    raise _fail(env, f"trial {trial}: {code} {exc}") from exc
    finally:
        await observer.close()
    summarize(env, fix, results, auth)


async def _trial(
    env: Env, fix: Fix, trial: int, login: Mapping[str, str], observer: asyncpg.Connection
) -> dict[str, Any]:
    p = env.params
    n, k, inside = p["customers"], p["crash_after"], p["pod2_connect"] == "inside"

    def job(pod: str) -> Job:
        return Job(pod, n, fix.unique, fix.xact_lock, p["bill_pause_ms"])

    await observer.execute("TRUNCATE invoices")
    env.trace("lab", f"trial {trial}", customers=n, crash_after=k)
    pods: list[Pod] = []
    race = Race()
    try:
        retry_lazy = p["retry_connect"] == "after"
        for name, lazy in (("pod-1", False), ("pod-2", inside), ("retry", retry_lazy)):
            pods.append(await Pod.spawn(env, job(name), login, lazy=lazy))
        await asyncio.gather(*(pod.started() for pod in pods))
        pod1, pod2, retry = pods
        await _race(env, observer, pod1, pod2, k, race)
        assert race.killed_at is not None and race.locked_at is not None
        if race.release is not None:
            release_ms: float | None = round(await race.release - race.killed_at, 2)
        else:
            release_ms = None
            await _released(env, observer, pod1.backend_pid)
        env.trace("server", "pod-1's lock is released", ms_after_kill=release_ms)
        committed = int(await observer.fetchval("SELECT count(*) FROM invoices"))
        billed, retry_ms = await _retry(env, retry)
    finally:
        if race.release is not None:
            race.release.cancel()
        for pod in pods:
            await pod.worker.close()
    counts = await observer.fetchrow(COUNTS, PERIOD)
    assert counts is not None
    return {
        "trial": trial,
        "customers": n,
        "crash_after": k,
        "pod1": {"billed": race.pod1_billed, "connect_ms": round(pod1.connect_ms, 2)},
        "pod2": {
            "result": race.pod2_result,
            "inserted": race.pod2_billed.inserted,
            "conflicts": race.pod2_billed.conflicts,
            "connect": p["pod2_connect"],
            "connect_ms": round(pod2.connect_ms, 2),
            "arrived_ms": round(race.pod2_sent_ms - race.locked_at, 2),  # after pod-1 locked
            "arrived": AFTER_CRASH if race.pod2_after_crash else BEFORE_CRASH,
        },
        "pod1_killed_ms": round(race.killed_at - race.locked_at, 2),  # after it locked
        "release_ms": release_ms,  # SIGKILL -> first poll that saw the lock gone
        "pod1_at_crash": race.at_crash,
        "committed_before_retry": committed,
        "retry": {"inserted": billed.inserted, "conflicts": billed.conflicts, **retry_ms},
        "invoices": counts["invoices"],
        "customers_invoiced": counts["customers_invoiced"],
        "max_per_key": counts["max_per_key"],
    }


async def _race(
    env: Env, observer: asyncpg.Connection, pod1: Pod, pod2: Pod, k: int, race: Race
) -> None:
    """pod-1 takes the lock and bills k customers, pod-2 starts, pod-1 is killed; until
    pod-2 has exited. Events of both pods are handled in the order they were written."""
    pod1.grant(1 + k)
    # every event the two pods can send: pod-1 locked, k billed, exit; pod-2 connected,
    # locked or skipped, n billed, done, exit
    for _ in range(k + pod2.job.customers + 6):
        if race.over:
            return
        worker, got = await workers.next_of([pod1.worker, pod2.worker], EVENT_TIMEOUT_S, skip=SKIP)
        pod, ev = (pod1 if worker is pod1.worker else pod2), _event(got)
        _trace_event(env, pod.job, ev)
        if not _on_event(env, race, pod is pod1, ev):
            raise pod.unexpected(ev)
        if pod is pod1 and ev["ev"] == "locked":  # pod-2 starts now
            race.pod2_asking = pod2.backend_pid != 0
            pod2.grant(steps(pod2.job) if race.pod2_asking else 1)
        elif pod is pod2 and ev["ev"] == "connected":
            pod2.connected(ev)
            race.pod2_asking, race.pod2_after_crash = True, race.killed_at is not None
            pod2.grant(steps(pod2.job))
        crash_point = race.locked_at is not None and race.pod1_billed == k
        if crash_point and race.killed_at is None and not race.pod2_asking:
            await _crash(env, observer, pod1, race)
    if not race.over:
        raise _fail(env, "the race sent more events than a pod-1 and a pod-2 can")


def _on_event(env: Env, race: Race, from_pod1: bool, ev: Mapping[str, Any]) -> bool:
    """Record one event of the race; False when it has no place in the choreography."""
    kind = ev["ev"]
    if from_pod1:
        if kind == "locked" and race.locked_at is None:
            race.locked_at = env.now_ms()
        elif kind == "billed":
            race.pod1_billed += 1
        return kind in ("locked", "billed") or (kind == "exit" and race.killed_at is not None)
    if kind in ("locked", "skipped"):
        race.pod2_asking = False
        race.pod2_result = "billed" if kind == "locked" else "skipped"
        race.pod2_sent_ms = (ev["sent_at"] - env.t0) * 1000  # same monotonic clock
    elif kind == "done":
        race.pod2_billed = Billed(ev["inserted"], ev["conflicts"])
    elif kind == "exit":
        race.pod2_exited = bool(race.pod2_result)
        return race.pod2_exited
    return kind in ("connected", "locked", "skipped", "billed", "done")


async def _crash(env: Env, observer: asyncpg.Connection, pod1: Pod, race: Race) -> None:
    """pod-1 waits after its k-th customer: a look at its session, then SIGKILL by PID (no
    cleanup in the pod; the server finds its connection dead)."""
    race.at_crash = dict(await observer.fetchrow(AT_CRASH, pod1.backend_pid) or {})
    pod1.worker.sigkill()
    race.killed_at = env.now_ms()
    env.trace(
        "lab",
        "SIGKILL pod-1",
        pid=pod1.worker.pid,
        after_customers=race.pod1_billed,
        session=race.at_crash.get("state"),
    )
    if race.pod2_result:  # pod-2 is done with the lock: polling now disturbs nobody
        race.release = asyncio.create_task(_released(env, observer, pod1.backend_pid))


async def _released(env: Env, observer: asyncpg.Connection, backend_pid: int) -> float:
    """When the server had dropped the killed session's advisory lock (ms on the run clock)."""

    async def gone() -> bool:
        return not await observer.fetchval(HOLDS_LOCK, backend_pid)

    what = f"{env.scenario} / {env.variant}: pod-1's lock released after SIGKILL"
    await until(gone, RELEASE_TIMEOUT_S, what, every=RELEASE_POLL_S)
    return env.now_ms()


async def _retry(env: Env, pod: Pod) -> tuple[Billed, dict[str, Any]]:
    """The Job's retry after the crash: a new pod, alone, run to the end (connected now,
    or with pod-1 before the race)."""
    pod.grant(pod.lazy + steps(pod.job))  # (connect, then) the whole job
    if pod.lazy:
        pod.connected(await pod.expect("connected"))
    _trace_event(env, pod.job, await pod.expect("locked"))
    insert_ms: list[float] = []
    conflict_ms: list[float] = []
    for _ in range(pod.job.customers):
        ev = await pod.expect("billed")
        _trace_event(env, pod.job, ev)
        (insert_ms if ev["inserted"] else conflict_ms).append(ev["ms"])
        env.sample("retry_insert_ms" if ev["inserted"] else "retry_conflict_ms", ev["ms"])
    done = await pod.expect("done")
    _trace_event(env, pod.job, done)
    await pod.expect("exit")
    return Billed(done["inserted"], done["conflicts"]), {
        "connect_ms": round(pod.connect_ms, 2),
        "insert_p50_ms": p50(insert_ms),
        "conflict_p50_ms": p50(conflict_ms),
    }
