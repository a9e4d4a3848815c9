"""Job retry: a poison job retried without backoff or a cap never ends, and a stuck one hides.

Symptom:    one job that always throws (a card declined) is retried in a tight loop forever:
            its attempts climb by the hundred, it is never marked failed; meanwhile a job
            whose handler hangs stays 'running' with no error anywhere.
Root cause: the failure path sets the job back to 'pending' at once (run_at = now()) and
            never gives up; nothing watches how long a job has been running.
Fix:        the document's failure path: run_at = now() + 2^attempts × 10 s, 'failed' once
            attempts reaches 5; an alert on the oldest running job's age finds the stuck one.
Published:  `const failed = job.attempts >= 5`, `2 ** job.attempts * 10 || ' seconds'`, no
            numbers — locking-concurrency-control.vi.txt, "Job queue với FOR UPDATE SKIP LOCKED"
See:        LC-30 in claims.py (quotes, evidence); scenarios/job_queue/ (LC-16, LC-17). Time
            is the subject: the document's seconds are ms here (BACKOFF_UNIT_MS 20 for 10 s,
            POLL_MS 2 for 1 s, LEASE_MS 5 s for 5 min). Steps, alike in both variants: a hung
            worker claims the stuck job; WORKERS workers loop over a poison job and HEALTHY_JOBS
            jobs due SPREAD_MS apart until all settle or RUN_WINDOW_MS ends; the alert runs.
Mutants:    the stuck job's claim never committed (its row lock held): the alert misses it;
            with the workers' claim on plain FOR UPDATE as well, every worker waits on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import asyncpg

from lab.aio import until, within
from lab.core.scenario import Env

BACKOFF_UNIT_MS = 20  # the document's 10 s: the gap after attempt a is 2^a units
MAX_ATTEMPTS = 5
POLL_MS = 2  # the document's 1 s sleep when no job is ready
LEASE_MS = 5_000  # the document's 5 minutes: longer than the run, the stuck job stays running
WORKERS = 3
HEALTHY_JOBS, SPREAD_MS = 30, 20  # healthy jobs come due 20 ms apart, over the retries
SCHEDULE_MS = sum(2**a * BACKOFF_UNIT_MS for a in range(1, MAX_ATTEMPTS))  # 600 ms of backoff
RUN_WINDOW_MS = SCHEDULE_MS * 3  # wide: a loaded machine still settles the fixed run in it
LIMIT_S = RUN_WINDOW_MS / 1000 + 30  # past this, a run not settled or stopped fails loudly
STUCK, POISON = 1, 2

CLAIM = f"""WITH next AS (SELECT id FROM jobs
  WHERE (status = 'pending' AND run_at <= now()) OR (status = 'running' AND locked_until < now())
  ORDER BY run_at LIMIT 10 FOR UPDATE SKIP LOCKED)
UPDATE jobs j SET status = 'running', attempts = j.attempts + 1,
  locked_until = now() + interval '{LEASE_MS} milliseconds'
FROM next WHERE j.id = next.id RETURNING j.id, j.kind, j.attempts"""
BLOCKING_CLAIM = CLAIM.replace("FOR UPDATE SKIP LOCKED", "FOR UPDATE")  # the mutants' claim
HANG = f"""UPDATE jobs SET status = 'running', attempts = 1,
  locked_until = now() + interval '{LEASE_MS} ms' WHERE id = {STUCK}"""
DONE = "UPDATE jobs SET status = 'done', locked_until = NULL WHERE id = $1"
FAIL = """UPDATE jobs SET status = $2, last_error = $3, locked_until = NULL,
  run_at = now() + $4 * interval '1 millisecond' WHERE id = $1"""
LOG = "INSERT INTO job_log (job_id, attempt, event) VALUES ($1, $2, $3)"
ALERT = f"""SELECT id, extract(epoch FROM now() - (locked_until - interval '{LEASE_MS}
  milliseconds')) * 1000 AS running_ms FROM jobs WHERE status = 'running'
  ORDER BY locked_until LIMIT 1"""
LEFT = "SELECT count(*) FROM jobs WHERE id <> $1 AND status NOT IN ('done', 'failed')"
# workers waiting on a lock: no claim waits with SKIP LOCKED and no worker writes another's job,
# so only a plain FOR UPDATE waits, on the stuck job's lock or in the queue behind it
WAITING = "SELECT count(*) FROM unnest($1::int[]) p WHERE cardinality(pg_blocking_pids(p)) > 0"


async def setup(env: Env) -> None:
    await env.db.execute("""CREATE TABLE jobs (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text NOT NULL,
      payload jsonb NOT NULL DEFAULT '{}', status text NOT NULL DEFAULT 'pending',
      run_at timestamptz NOT NULL DEFAULT now(), locked_until timestamptz,
      attempts int NOT NULL DEFAULT 0, last_error text);
    CREATE INDEX jobs_ready_idx ON jobs (run_at) WHERE status IN ('pending', 'running');
    CREATE TABLE job_log (job_id bigint, attempt int, event text,
      at timestamptz NOT NULL DEFAULT clock_timestamp())""")  # the lab's stamps


class JobError(Exception):
    """What the poison job's handler raises, every time."""


Fail = Callable[[asyncpg.Connection, asyncpg.Record, str], Awaitable[None]]


async def handle(kind: str) -> None:  # the application's handlers
    if kind == "poison":
        raise JobError("card declined")


async def fail_buggy(conn: asyncpg.Connection, job: asyncpg.Record, err: str) -> None:
    await conn.execute(FAIL, job["id"], "pending", err, 0)  # again at once, forever


async def fail_fixed(conn: asyncpg.Connection, job: asyncpg.Record, err: str) -> None:
    failed = job["attempts"] >= MAX_ATTEMPTS  # the document's failure path
    backoff = 2 ** job["attempts"] * BACKOFF_UNIT_MS
    await conn.execute(FAIL, job["id"], "failed" if failed else "pending", err, backoff)


# the document's workerLoop, one turn at a time until the lab says stop
async def worker(conn: asyncpg.Connection, stop: asyncio.Event, fail: Fail, claim: str) -> None:
    async def turn() -> bool:
        batch = await conn.fetch(claim)  # step claim: commits at once
        if not batch:
            with contextlib.suppress(TimeoutError):  # named: the document's poll sleep
                await within(stop.wait(), POLL_MS / 1000)
        for job in batch:
            await conn.execute(LOG, job["id"], job["attempts"], "claimed")
            try:  # step run
                await handle(job["kind"])
                await conn.execute(DONE, job["id"])  # step done
                await conn.execute(LOG, job["id"], job["attempts"], "done")
            except JobError as exc:  # step fail: the variant's failure path
                await fail(conn, job, str(exc))
        return stop.is_set()

    await until(turn, LIMIT_S, "the worker to stop", every=0)


async def run(env: Env, fail: Fail, claim: str = CLAIM, in_tx: bool = False) -> None:
    """The steps, alike in every variant. A mutant's workers claim with `claim`; with
    `in_tx` the hung worker's claim of the stuck job stays uncommitted, its row lock held."""
    hung, *conns = [await env.connect() for _ in range(WORKERS + 1)]
    await env.db.execute("INSERT INTO jobs (kind) VALUES ('stuck'), ('poison')")  # step enqueue
    if in_tx:  # the document's "transaction treo": a claim whose transaction never ends
        await hung.execute("BEGIN")
    await hung.execute(HANG)  # step hang: a worker claims the stuck job; it never returns
    stuck_at = time.perf_counter()
    await env.db.execute(  # step enqueue: the healthy jobs, coming due as the workers start
        f"INSERT INTO jobs (kind, run_at) SELECT 'email', now() + i * interval '{SPREAD_MS} ms'"
        f" FROM generate_series(1, {HEALTHY_JOBS}) i"
    )
    stop = asyncio.Event()
    tasks = [asyncio.create_task(worker(c, stop, fail, claim)) for c in conns]
    pids = [c.get_server_pid() for c in conns]
    deadline = time.perf_counter() + RUN_WINDOW_MS / 1000

    async def settled() -> bool:  # the queue drained, a worker ended, or the window closed
        late = time.perf_counter() >= deadline or any(t.done() for t in tasks)
        return late or await env.db.fetchval(LEFT, STUCK) == 0

    async def ended() -> bool:  # every worker ended its turn, or waits on a lock
        left = sum(not t.done() for t in tasks)
        return left == 0 or left == await env.db.fetchval(WAITING, pids)

    try:
        await until(settled, LIMIT_S, "the run's window to close", every=POLL_MS / 1000)
        stop.set()
        await until(ended, LIMIT_S, "the workers to end their turn", every=POLL_MS / 1000)
        stalled = [p for p, t in zip(pids, tasks, strict=True) if not t.done()]
        # a worker waiting on a lock would wait for ever: its claim is cancelled on the server
        # (asyncpg's own cancel may land late, after the lock is let go and the claim commits)
        await env.db.execute("SELECT pg_cancel_backend(p) FROM unnest($1::int[]) p", stalled)
        for got in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(got, BaseException) and not isinstance(got, asyncpg.QueryCanceledError):
                raise got  # a worker's own error
        alert = await env.db.fetchrow(ALERT)  # step alert: the oldest running job
        seen = await env.db.fetchval("SELECT status FROM jobs WHERE id = $1", STUCK)
        env.state.update(alert=alert, stuck_ms=(time.perf_counter() - stuck_at) * 1000)
        env.state.update(stalled=len(stalled), stuck_seen=seen)
    finally:
        stop.set()
        for c in (hung, *conns):
            c.terminate()
    for j in await env.db.fetch("SELECT status FROM jobs"):
        env.outcome(j["status"])


async def buggy(env: Env) -> None:
    await run(env, fail_buggy)


async def fixed(env: Env) -> None:
    await run(env, fail_fixed)  # the whole fix: the failure path


# Code mutants, not variants: the stuck job's claim left uncommitted (its row lock held, as the
# document's "transaction treo"), with SKIP LOCKED kept or dropped from the workers' claim
async def hung_tx(env: Env) -> None:
    await run(env, fail_fixed, in_tx=True)


async def hung_tx_blocking(env: Env) -> None:
    await run(env, fail_fixed, BLOCKING_CLAIM, in_tx=True)


async def buggy_hung_tx_blocking(env: Env) -> None:
    await run(env, fail_buggy, BLOCKING_CLAIM, in_tx=True)
