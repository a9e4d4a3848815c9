"""One pod of cron-rerun: `run_job` in a process of its own, one granted step at a time.

Run as a script by the lab (lab.procs.workers: it dies with the lab), with the job as its config.
It connects at once and reports ``connected``, or (``lazy``) connects when granted its
first step; then every step point of `run_job` waits for a grant of the step ``go``: try
the lock, bill customer 1..N, finish (unlock or commit). Every step is reported as an
event. The lab SIGKILLs pod-1 while it waits for a grant; nothing here knows whether that
will come. Run as a script (its folder is ``sys.path[0]``), it imports no scenario
package: the catalogue stays out of the pod, which starts fast.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from lab.procs.workers import Child, run_child

if __package__:  # imported as a module (mypy, tests)
    from scenarios.cron_rerun.cron_rerun import Job, run_job
else:  # the pod process
    from cron_rerun import Job, run_job  # type: ignore[import-not-found,no-redef]


async def main(child: Child) -> None:
    config = child.config
    job = Job(**config["job"])

    def report(event: dict[str, Any]) -> None:
        child.emit(event.pop("ev"), **event)

    async def gate() -> None:
        await child.step("go")

    try:
        if config["lazy"]:
            await gate()
        t0 = time.perf_counter()
        conn = await asyncpg.connect(config["dsn"], **config["login"])
        child.emit(
            "connected",
            backend_pid=conn.get_server_pid(),
            connect_ms=(time.perf_counter() - t0) * 1000,
        )
        await run_job(conn, job, report, gate)
        await conn.close()
    except (asyncpg.PostgresError, OSError) as exc:
        child.emit("error", error=f"{getattr(exc, 'sqlstate', '')} {type(exc).__name__}: {exc}")
        raise SystemExit(1) from exc


if __name__ == "__main__":
    run_child(main)
