"""cron-rerun's pods for a trial: each a pod.py process (lab.procs.workers) granted step by
step, its events, and how the pods log in (the run's user, or a throwaway role whose
password has the run's SCRAM iteration count, lab.servers.pgauth: a login then costs what
DL-17 measures)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lab.core.scenario import Env
from lab.errors import ScenarioFailure
from lab.procs import workers
from lab.servers import pgauth
from scenarios.cron_rerun.cron_rerun import Billed, Job
from scenarios.cron_rerun.trials import p50

POD = Path(__file__).with_name("pod.py")


EVENT_TIMEOUT_S = 30.0  # a pod silent this long has failed


TRACE_CUSTOMERS = 10  # trace every customer only for small jobs


SKIP = ("step", "returned")  # the protocol's own events: the choreography reads the job's


def fail(env: Env, what: str) -> ScenarioFailure:
    return ScenarioFailure(f"{env.scenario} / {env.variant}: {what}")


class Pod:
    """One pod: a pod.py process (lab.procs.workers), granted step by step."""

    def __init__(self, env: Env, job: Job, worker: workers.Worker, lazy: bool) -> None:
        self.env = env
        self.job = job
        self.name = job.pod
        self.worker = worker
        self.lazy = lazy
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
        """Let the pod take up to `steps` more steps (connect, lock, one customer each,
        finish): in one write, since a pod-2 that skips takes one and exits at once."""
        self.worker.grant("go", steps)

    async def expect(self, *events: str) -> dict[str, Any]:
        ev = event(await self.worker.next(EVENT_TIMEOUT_S, skip=SKIP))
        if ev["ev"] not in events:
            raise self.unexpected(ev)
        return ev

    def unexpected(self, ev: Mapping[str, Any]) -> ScenarioFailure:
        if ev["ev"] == "exit":
            return fail(self.env, f"{self.name} exited: {self.worker.status()}")
        return fail(self.env, f"{self.name}: {ev.get('error') or f'unexpected {ev}'}")


def event(ev: workers.Event) -> dict[str, Any]:
    return {"ev": ev.name, **ev.fields}


def trace_event(env: Env, job: Job, ev: Mapping[str, Any]) -> None:
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
async def pod_login(env: Env) -> AsyncIterator[tuple[dict[str, str], str]]:
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


def steps(job: Job) -> int:
    """The grants a whole job takes: the lock, each customer, the end."""
    return job.customers + 2


async def run_retry(env: Env, pod: Pod) -> tuple[Billed, dict[str, Any]]:
    """The Job's retry after the crash: a new pod, alone, run to the end (connected now,
    or with pod-1 before the race)."""
    pod.grant(pod.lazy + steps(pod.job))  # (connect, then) the whole job
    if pod.lazy:
        pod.connected(await pod.expect("connected"))
    trace_event(env, pod.job, await pod.expect("locked"))
    insert_ms: list[float] = []
    conflict_ms: list[float] = []
    for _ in range(pod.job.customers):
        ev = await pod.expect("billed")
        trace_event(env, pod.job, ev)
        (insert_ms if ev["inserted"] else conflict_ms).append(ev["ms"])
        env.sample("retry_insert_ms" if ev["inserted"] else "retry_conflict_ms", ev["ms"])
    done = await pod.expect("done")
    trace_event(env, pod.job, done)
    await pod.expect("exit")
    return Billed(done["inserted"], done["conflicts"]), {
        "connect_ms": round(pod.connect_ms, 2),
        "insert_p50_ms": p50(insert_ms),
        "conflict_p50_ms": p50(conflict_ms),
    }
