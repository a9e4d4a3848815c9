"""One pod of cron-rerun: `run_job` in a process of its own, one granted step at a time.

Run as a script by the lab (lab.procs.workers: it dies with the lab), with the job as its
config. Every step point of `run_job` (try the lock, bill customer 1..N, finish: unlock or
commit) waits for a grant:

* in a trial (choreography.py) each grant is the step ``go``: the pod connects at once and
  reports ``connected``, or (``lazy``) connects when granted its first step, and reports
  every step as an event. The lab SIGKILLs pod-1 while it waits for a grant; nothing here
  knows whether that will come.
* ``pinned`` (a schedule, lab/pinned/stage.py): each step is granted by name through a
  ChildGate and printed in the transcript; the schedule kills pod-1 between two steps.

Run as a script (its folder is ``sys.path[0]``), it imports no scenario package: the
catalogue stays out of the pod, which starts fast.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from lab.core.steps import Session
from lab.pinned.stage import ChildGate
from lab.procs.workers import Child, run_child

if __package__:  # imported as a module (mypy, tests)
    from scenarios.cron_rerun.cron_rerun import Job, run_job
else:  # the pod process
    from cron_rerun import Job, run_job  # type: ignore[import-not-found,no-redef]


class GoGate:
    """A trial's gate: every step point waits for the lab's next ``go``."""

    def __init__(self, child: Child) -> None:
        self.child = child

    async def ask(self, session: Session, step: str, shown: str) -> None:
        await self.child.step("go")

    def finished(self, session: Session, step: str, result: str) -> None:
        return None

    def failed(self, session: Session, step: str, exc: BaseException) -> None:
        return None

    def waiting(self, session: Session, predicate: Callable[[], Awaitable[bool]] | None) -> None:
        return None


async def main(child: Child) -> str:
    config = child.config
    job = Job(**config["job"])

    def report(event: dict[str, Any]) -> None:
        if not config.get("pinned"):
            child.emit(event.pop("ev"), **event)

    try:
        if config["lazy"]:
            await child.step("go")
        t0 = time.perf_counter()
        conn = await asyncpg.connect(config["dsn"], **config["login"])
        child.emit(
            "connected",
            backend_pid=conn.get_server_pid(),
            connect_ms=(time.perf_counter() - t0) * 1000,
        )
        gate = ChildGate(child) if config.get("pinned") else GoGate(child)
        billed = await run_job(Session(job.pod, conn, 0, gate=gate), job, report)
        await conn.close()
    except (asyncpg.PostgresError, OSError) as exc:
        child.emit("error", error=f"{getattr(exc, 'sqlstate', '')} {type(exc).__name__}: {exc}")
        raise SystemExit(1) from exc
    return "skipped" if billed is None else "billed"


if __name__ == "__main__":
    run_child(main)
