"""cron-rerun's pods for a trial: each a pod.py process (lab.procs.workers) granted step by
step, an actor of the trial's story (lab.pinned.timed) whose events are the job's, and
how the pods log in (the run's user, or a throwaway role whose password has the run's
SCRAM iteration count, lab.servers.pgauth: a login then costs what DL-17 measures)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lab.core.scenario import Env
from lab.errors import ScenarioFailure
from lab.pinned.timed import Actor
from lab.procs import workers
from lab.servers import pgauth
from scenarios.cron_rerun.cron_rerun import Billed, Job

POD = Path(__file__).with_name("pod.py")
EVENT_TIMEOUT_S = 30.0  # a pod silent this long has failed
TRACE_CUSTOMERS = 10  # trace every customer only for small jobs
PROTOCOL = ("step", "returned")  # the worker protocol's own events: the story reads the job's


def fail(env: Env, what: str) -> ScenarioFailure:
    return ScenarioFailure(f"{env.scenario} / {env.variant}: {what}")


class Pod(Actor):
    """One pod: a pod.py process granted step by step, and the story's actor for it. Its
    events: ready, connected, locked or skipped (``answered``), billed (one per customer),
    done, and its end (``done``: it exited, or was killed)."""

    def __init__(self, env: Env, job: Job, lazy: bool) -> None:
        super().__init__(env, job.pod, turns=())
        self.job = job
        self.lazy = lazy
        self.worker: workers.Worker | None = None
        self.answered = asyncio.Event()  # its lock attempt came back: locked or skipped
        self.backend_pid = 0  # 0 until connected
        self.connect_ms = 0.0
        self.result = ""  # billed | skipped: what its lock attempt gave
        self.sent_at = 0.0  # when it sent that attempt (the lab's monotonic clock)
        self.billed = Billed()  # its "done": what it inserted and found billed
        self.bills: list[tuple[bool, float]] = []  # (inserted, ms) per customer
        self.returned = False  # its job returned (the process then exits by itself)
        self.error = ""

    @classmethod
    async def spawn(cls, env: Env, job: Job, login: Mapping[str, str], *, lazy: bool) -> Pod:
        """Start the process; a `lazy` pod connects only when granted its first step."""
        self = cls(env, job, lazy)
        # The job goes over stdin, so a password never shows in argv or the environment.
        config = {"dsn": env.dsn, "login": dict(login), "job": asdict(job), "lazy": lazy}
        # forked by the fork server (lab/procs/forkserver.py): a process of its own all the same
        self.worker = await workers.Worker.spawn(
            POD, config, name=job.pod, on_event=self._on_event, ready_s=None, fork=True
        )
        return self

    def started(self) -> asyncio.Event:
        """Set once the process is up (lazy) or connected."""
        return self.reached("ready" if self.lazy else "connected")

    def grant(self, steps: int) -> None:
        """Let the pod take up to `steps` more steps (connect, lock, one customer each,
        finish): in one write, since a pod-2 that skips takes one and exits at once."""
        self.alive()
        assert self.worker is not None
        self.worker.grant("go", steps)

    def alive(self) -> None:
        """A ScenarioFailure naming what went wrong, if the pod failed."""
        if self.error:
            raise fail(self.env, self.error)

    def _on_event(self, ev: workers.Event) -> None:
        if ev.name in PROTOCOL:
            self.returned = self.returned or ev.name == "returned"
            return
        kind, f = ev.name, ev.fields
        if kind == "connected":
            self.backend_pid, self.connect_ms = f["backend_pid"], f["connect_ms"]
            self.env.trace(self.who, "connected", ms=round(self.connect_ms, 2))
        elif kind in ("locked", "skipped"):
            self.result = "billed" if kind == "locked" else "skipped"
            self.sent_at = f["sent_at"]
            self.answered.set()
        elif kind == "billed":
            self.bills.append((bool(f["inserted"]), float(f["ms"])))
        elif kind == "done":
            self.billed = Billed(f["inserted"], f["conflicts"])
        elif kind in ("error", "garbled"):
            self.error = f"{self.who}: {f.get('error') or f.get('line')}"
        trace_event(self.env, self.job, {"ev": kind, **f})
        self.saw(kind)
        if kind == "exit":
            assert self.worker is not None
            if not self.worker.killed and not self.returned and not self.error:
                self.error = f"{self.who} exited: {self.worker.status()}"
            self.end()

    def end(self, outcome: str | None = None) -> None:
        super().end(outcome)
        self.answered.set()

    def kill(self) -> None:
        """SIGKILL by PID: no cleanup in the pod; the server finds its connection dead."""
        assert self.worker is not None
        self.worker.sigkill()

    async def close(self) -> None:
        if self.worker is not None:
            await self.worker.close()


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
