"""cron-rerun's machinery for a trial: the race, the crash, the retry.

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
The pods, their events and their login: pods.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from lab.aio import until
from lab.core.scenario import Env
from lab.procs import workers
from scenarios.cron_rerun.cron_rerun import PERIOD, Billed, Fix, Job
from scenarios.cron_rerun.pods import (
    EVENT_TIMEOUT_S,
    SKIP,
    Pod,
    event,
    fail,
    pod_login,
    run_retry,
    steps,
    trace_event,
)
from scenarios.cron_rerun.trials import COUNTS, summarize

RELEASE_TIMEOUT_S = 10.0  # the server must notice the killed session within this
RELEASE_POLL_S = 0.001
BEFORE_CRASH, AFTER_CRASH = "before the crash", "after the crash"

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
        async with pod_login(env) as (login, auth):
            results = []
            for trial in range(1, env.params["trials"] + 1):
                try:
                    results.append(await _trial(env, fix, trial, login, observer))
                except (asyncpg.PostgresError, OSError) as exc:
                    code = getattr(exc, "sqlstate", None) or type(exc).__name__
                    raise fail(env, f"trial {trial}: {code} {exc}") from exc
    finally:
        await observer.close()
    summarize(env, fix, results, auth)


async def _trial(
    env: Env, fix: Fix, trial: int, login: Mapping[str, str], observer: asyncpg.Connection
) -> dict[str, Any]:
    p = env.params
    n = p["customers"]
    k = p["crash_after"]
    inside = p["pod2_connect"] == "inside"

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
        billed, retry_ms = await run_retry(env, retry)
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
        pod, ev = (pod1 if worker is pod1.worker else pod2), event(got)
        trace_event(env, pod.job, ev)
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
        raise fail(env, "the race sent more events than a pod-1 and a pod-2 can")


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
