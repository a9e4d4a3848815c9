"""A procrastinate worker, as its users write one: an App on a PsycopgConnector (a
psycopg_pool pool; LISTEN/NOTIFY on a connection of its own, polling beside it), a task
that records each run in the table `ran`, and a worker that drains the queue and stops.

    DATABASE_URL=postgresql://... python jobqueue_procrastinate.py [NAME]

procrastinate-setup.sql makes its schema and defers six `record_run` jobs to the queue
`jobs`; two of these workers at once must run each job exactly once
(procrastinate-drained.sql). wait=False: the worker stops once it has caught up with the
queue, so it exits 0 when the queue is drained.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

import procrastinate
from procrastinate import JobContext, PsycopgConnector

QUEUE = "jobs"

# The connector reads its DSN at open; with_connector() below gives it the one to use.
app = procrastinate.App(connector=PsycopgConnector())


@app.task(name="record_run", queue=QUEUE, pass_context=True)
async def record_run(context: JobContext, n: int) -> None:
    """The job's work: one row in `ran` naming the job and the worker that ran it, on a
    connection of the app's own pool."""
    connector = context.app.connector
    assert isinstance(connector, PsycopgConnector)
    async with connector.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO ran (job_id, worker) VALUES (%s, %s)",
            (context.job.id, context.worker_name),
        )


async def drain(dsn: str, name: str) -> None:
    """Run one worker on `dsn` until the queue `jobs` has no job left to take."""
    worker_app = app.with_connector(PsycopgConnector(conninfo=dsn))
    async with worker_app.open_async():
        await worker_app.run_worker_async(queues=[QUEUE], name=name, wait=False)


def main(dsn: str, name: str = "worker") -> None:
    """One worker on `dsn`, named `name` in `ran`, to the end of the queue."""
    asyncio.run(drain(dsn, name))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", default=f"worker-{os.getpid()}")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    main(os.environ.get("DATABASE_URL", ""), args.name)
