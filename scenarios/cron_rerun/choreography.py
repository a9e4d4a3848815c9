"""cron-rerun's trial as a story (lab.pinned.timed): the race, the crash, the retry.

One trial, on an empty invoices table; pod-1, pod-2 and the retry are pod.py processes
(pods.py), connected at the start but for a pod that connects late (pod2_connect=inside,
retry_connect=after). STORY's steps, each after the events it waits for, never after a
guessed time; its lanes run side by side, one step at a time:

  pod-1 takes the lock   granted "try the lock + k customers"; then it waits, at the
                         crash point;
  pod-2 starts           once pod-1 locked: granted its job (before), or only its connect
                         (inside);
  pod-2 tries the lock   (inside) once connected: granted its job (after the crash, once
                         the server has ended pod-1's session: it comes after pod-1 is gone);
  pod-1 is killed        once it billed k, and not while pod-2's lock attempt is
                         unanswered: a look at pod-1's session (LC-3), then SIGKILL by PID;
  the server ends pod-1's session   once pod-2 has exited: its lock is gone (polled);
  the retry runs alone   granted the whole job (connecting first, when it was not).

Whether pod-2 tries the lock before or after the crash is the order in which its step
and pod-1's came due: the race the server saw.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import asyncpg

from lab.aio import until
from lab.core.scenario import Env
from lab.pinned.timed import Step, bounded, run_steps
from scenarios.cron_rerun.cron_rerun import PERIOD, Fix, Job
from scenarios.cron_rerun.pods import EVENT_TIMEOUT_S, Pod, fail, pod_login, steps
from scenarios.cron_rerun.trials import (
    AFTER_CRASH,
    BEFORE_CRASH,
    COUNTS,
    FirstPod,
    Retry,
    SecondPod,
    Trial,
    p50,
    summarize,
)

RELEASE_TIMEOUT_S = 10.0  # the server must notice the killed session within this
RELEASE_POLL_S = 0.001

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
) -> Trial:
    p = env.params

    def job(pod: str) -> Job:
        return Job(pod, p["customers"], fix.unique, fix.xact_lock, p["bill_pause_ms"], fix.locks)

    await observer.execute("TRUNCATE invoices")
    env.trace("lab", f"trial {trial}", customers=p["customers"], crash_after=p["crash_after"])
    pods: list[Pod] = []
    try:
        inside, retry_lazy = p["pod2_connect"] == "inside", p["retry_connect"] == "after"
        for name, lazy in (("pod-1", False), ("pod-2", inside), ("retry", retry_lazy)):
            pods.append(await Pod.spawn(env, job(name), login, lazy=lazy))
        for pod in pods:
            await bounded(pod.started(), f"{pod.who} to start", EVENT_TIMEOUT_S, label(env))
            pod.alive()
        race = Race(env, observer, *pods)
        await run_steps(env, race.story(), EVENT_TIMEOUT_S, race.check)
    finally:
        for pod in pods:
            await pod.close()
    return await race.trial(trial)


def label(env: Env) -> str:
    return f"{env.scenario} / {env.variant}"


class Race:
    """One trial's story: its steps, what each does, and what it saw."""

    def __init__(
        self, env: Env, observer: asyncpg.Connection, pod1: Pod, pod2: Pod, retry: Pod
    ) -> None:
        self.env, self.observer = env, observer
        self.pod1 = pod1
        self.pod2 = pod2
        self.retry = retry
        self.k = env.params["crash_after"]
        self.locked_at = 0.0  # when pod-1 reported its lock (the run's clock)
        self.killed_at = 0.0
        self.killed = asyncio.Event()
        self.at_crash: dict[str, Any] = {}
        self.pod2_after_crash = False  # pod-2's lock attempt was granted after the SIGKILL
        self.release: asyncio.Task[float] | None = None  # polls from the SIGKILL on
        self.release_ms: float | None = None
        self.released = asyncio.Event()
        self.committed = 0
        self._at_once = asyncio.Event()
        self._at_once.set()

    def story(self) -> list[Step]:
        """The trial's steps, in lanes: pod-2's first, so at a tie pod-2 goes before the
        crash. A pod-2 connected at the start tries the lock in its first step."""
        pod1, pod2 = self.pod1, self.pod2
        locked = ("pod-1 to take the lock", pod1.reached("locked"))
        connected = ("pod-2 to connect", pod2.reached("connected"))
        billed = (f"pod-1 to bill {self.k} customers", pod1.reached("billed", self.k))
        exited = [("pod-2 to exit", pod2.done), ("pod-1 to exit", pod1.done)]
        story = [
            Step(0, "pod-2 starts", self.start_pod2, self.pod2_started, [locked], "pod-2"),
            Step(0, "pod-2 tries the lock", self.ask_pod2, pod2.answered, [connected], "pod-2"),
            Step(0, "pod-1 takes the lock", self.start_pod1, pod1.reached("locked"), [], "pod-1"),
            Step(0, "pod-1 is killed", self.crash, self.killed, [billed], "pod-1"),
            Step(0, "the server ends pod-1's session", self.session_ended, self.released, exited),
            Step(0, "the retry runs alone", self.run_retry, self.retry.done),
        ]
        return [s for s in story if pod2.lazy or s.name != "pod-2 tries the lock"]

    @property
    def pod2_started(self) -> asyncio.Event:
        """pod-2's first step ends when its lock attempt is answered, or at once (inside)."""
        return self._at_once if self.pod2.lazy else self.pod2.answered

    def start_pod1(self) -> None:
        self.pod1.grant(1 + self.k)

    def start_pod2(self) -> None:
        self.locked_at = self.env.now_ms()
        self.pod2.grant(1 if self.pod2.lazy else steps(self.pod2.job))

    async def ask_pod2(self) -> None:
        """pod-2, connected, is granted its job; one that comes after the SIGKILL comes
        after pod-1 is gone: not before the server has ended pod-1's session (else it can
        find the dead session's lock still held, a few ms after the kill)."""
        self.pod2_after_crash = self.killed.is_set()
        if self.pod2_after_crash:
            await self._released()
        self.pod2.grant(steps(self.pod2.job))

    async def crash(self) -> None:
        """pod-1 waits after its k-th customer: a look at its session, then SIGKILL."""
        pod1 = self.pod1
        pod1.alive()
        self.at_crash = dict(await self.observer.fetchrow(AT_CRASH, pod1.backend_pid) or {})
        pod1.kill()
        self.killed_at = self.env.now_ms()
        self.env.trace(
            "lab",
            "SIGKILL pod-1",
            pid=pod1.worker.pid if pod1.worker else 0,
            after_customers=self.k,
            session=self.at_crash.get("state"),
        )
        if self.pod2.answered.is_set():  # pod-2 is done with the lock: polling disturbs nobody
            self.release = asyncio.create_task(self._released())
        self.killed.set()

    async def session_ended(self) -> None:
        """The server drops the killed session's lock when it sees the connection die."""
        if self.release is not None:
            self.release_ms = round(await self.release - self.killed_at, 2)
        else:
            await self._released()
        self.env.trace("server", "pod-1's lock is released", ms_after_kill=self.release_ms)
        self.committed = int(await self.observer.fetchval("SELECT count(*) FROM invoices"))
        self.released.set()

    def run_retry(self) -> None:
        """The Job's retry after the crash: (connect, then) the whole job, alone."""
        self.retry.grant(self.retry.lazy + steps(self.retry.job))

    def check(self, step: str) -> None:
        for pod in (self.pod1, self.pod2, self.retry):
            pod.alive()
        if step == "the retry runs alone" and not self.retry.returned:
            raise fail(self.env, "the retry ended without finishing its job")

    async def _released(self) -> float:
        """When the server had dropped the killed session's advisory lock (the run's clock)."""
        backend_pid = self.pod1.backend_pid

        async def gone() -> bool:
            return not await self.observer.fetchval(HOLDS_LOCK, backend_pid)

        what = f"{label(self.env)}: pod-1's lock released after SIGKILL"
        await until(gone, RELEASE_TIMEOUT_S, what, every=RELEASE_POLL_S)
        return self.env.now_ms()

    async def trial(self, number: int) -> Trial:
        """What the trial did, and the table's counts after it."""
        counts = await self.observer.fetchrow(COUNTS, PERIOD)
        assert counts is not None
        pod1 = self.pod1
        pod2 = self.pod2
        retry = self.retry
        for inserted, ms in retry.bills:
            self.env.sample("retry_insert_ms" if inserted else "retry_conflict_ms", ms)
        return Trial(
            trial=number,
            customers=pod1.job.customers,
            crash_after=self.k,
            pod1=FirstPod(pod1.counts.get("billed", 0), round(pod1.connect_ms, 2)),
            pod2=SecondPod(
                result=pod2.result,
                inserted=pod2.billed.inserted,
                conflicts=pod2.billed.conflicts,
                connect=self.env.params["pod2_connect"],
                connect_ms=round(pod2.connect_ms, 2),
                arrived_ms=round((pod2.sent_at - self.env.t0) * 1000 - self.locked_at, 2),
                arrived=AFTER_CRASH if self.pod2_after_crash else BEFORE_CRASH,
            ),
            pod1_killed_ms=round(self.killed_at - self.locked_at, 2),
            release_ms=self.release_ms,
            pod1_at_crash=self.at_crash,
            committed_before_retry=self.committed,
            retry=Retry(
                inserted=retry.billed.inserted,
                conflicts=retry.billed.conflicts,
                connect_ms=round(retry.connect_ms, 2),
                insert_p50_ms=p50([ms for inserted, ms in retry.bills if inserted]),
                conflict_p50_ms=p50([ms for inserted, ms in retry.bills if not inserted]),
            ),
            invoices=counts["invoices"],
            customers_invoiced=counts["customers_invoiced"],
            max_per_key=counts["max_per_key"],
        )
