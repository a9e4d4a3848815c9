"""Job retry: a poison job retried without backoff or a cap never ends, and a stuck one hides.

Symptom:    one job that always throws (a card declined) is retried in a tight loop forever:
            its attempts climb by the hundred, it is never marked failed, the workers spend
            their polls on it; meanwhile a job whose handler hangs stays 'running' with no
            error anywhere.
Root cause: the failure path sets the job back to 'pending' at once (run_at = now()) and
            never gives up; nothing watches how long a job has been running.
Fix:        the document's failure path: run_at = now() + 2^attempts × 10 s, and 'failed'
            once attempts reaches 5; an alert on the age of the oldest running job
            (`now() - (locked_until - lease)`), which finds the stuck one.
Published:  `const failed = job.attempts >= 5; ... run_at = now() + (2 ** job.attempts * 10
            || ' seconds')`; "SKIP LOCKED che lỗi: một job bị khoá mãi ... Cần alert trên
            tuổi của job running lâu nhất." No numbers (PostgreSQL 17.11)
            — locking-concurrency-control.vi.txt, "Job queue với FOR UPDATE SKIP LOCKED"
See:        claim LC-30 (its alert finds LC-17's stuck job); scenarios/job_queue/job_queue.py (the claim
            itself, LC-16). Time is the subject here, so the document's seconds become milliseconds:
            BACKOFF_UNIT_MS is 20 ms (10 s there),
            POLL_MS 2 ms (1 s), LEASE_MS 5 s (5 min; longer than the run). Steps, the same in both
            variants (only the failure path differs): a hung worker claims the stuck job; WORKERS
            workers run the document's loop over a poison job and HEALTHY_JOBS jobs that come due
            SPREAD_MS apart; the run stops when every healthy job is done and the poison job has
            failed, or after RUN_WINDOW_MS; the alert query runs. The server's clock_timestamp()
            stamps every attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable, Mapping

import asyncpg

from lab.aio import within
from lab.claims import Claim, Record
from lab.scenario import Defaults, Env, Scenario

BACKOFF_UNIT_MS = 20  # the document's 10 s: the gap after attempt a is 2^a units
MAX_ATTEMPTS = 5
POLL_MS = 2  # the document's 1 s sleep when no job is ready
LEASE_MS = 5_000  # the document's 5 minutes: longer than the run, the stuck job stays running
WORKERS = 3
HEALTHY_JOBS, SPREAD_MS = 30, 20  # healthy jobs come due 20 ms apart, over the retries
SCHEDULE_MS = sum(2**a * BACKOFF_UNIT_MS for a in range(1, MAX_ATTEMPTS))  # 600 ms of backoff
RUN_WINDOW_MS = SCHEDULE_MS * 3  # the run's limit: wide, so a loaded machine still fails the
# fixed poison job and finishes the healthy ones in it (the fixed run stops as soon as they are)
STUCK, POISON = 1, 2

CLAIM = f"""
WITH next AS (
  SELECT id FROM jobs
  WHERE (status = 'pending' AND run_at <= now())
     OR (status = 'running' AND locked_until < now())
  ORDER BY run_at LIMIT 10 FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET status = 'running', attempts = j.attempts + 1,
  locked_until = now() + interval '{LEASE_MS} milliseconds'
FROM next WHERE j.id = next.id RETURNING j.id, j.kind, j.attempts
"""
DONE = "UPDATE jobs SET status = 'done', locked_until = NULL WHERE id = $1"
FAIL = """UPDATE jobs SET status = $2, last_error = $3, locked_until = NULL,
  run_at = now() + $4 * interval '1 millisecond' WHERE id = $1"""
LOG = "INSERT INTO job_log (job_id, attempt, event) VALUES ($1, $2, $3)"
ALERT = f"""SELECT id, extract(epoch FROM now() - (locked_until - interval '{LEASE_MS}
  milliseconds')) * 1000 AS running_ms FROM jobs WHERE status = 'running'
  ORDER BY locked_until LIMIT 1"""


async def setup(env: Env) -> None:
    await env.db.execute("""CREATE TABLE jobs (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text NOT NULL,
      payload jsonb NOT NULL DEFAULT '{}', status text NOT NULL DEFAULT 'pending',
      run_at timestamptz NOT NULL DEFAULT now(), locked_until timestamptz,
      attempts int NOT NULL DEFAULT 0, last_error text);
    CREATE INDEX jobs_ready_idx ON jobs (run_at) WHERE status IN ('pending', 'running');
    CREATE TABLE job_log (job_id bigint, attempt int, event text,
      at timestamptz NOT NULL DEFAULT clock_timestamp())""")  # the lab's stamps


Fail = Callable[[asyncpg.Connection, asyncpg.Record, str], Awaitable[None]]


class JobError(Exception):
    """What the poison job's handler raises, every time."""


async def handle(kind: str) -> None:  # the application's handlers
    if kind == "poison":
        raise JobError("card declined")


async def fail_buggy(conn: asyncpg.Connection, job: asyncpg.Record, err: str) -> None:
    await conn.execute(FAIL, job["id"], "pending", err, 0)  # again at once, forever


async def fail_fixed(conn: asyncpg.Connection, job: asyncpg.Record, err: str) -> None:
    failed = job["attempts"] >= MAX_ATTEMPTS  # the document's failure path
    backoff = 2 ** job["attempts"] * BACKOFF_UNIT_MS
    await conn.execute(FAIL, job["id"], "failed" if failed else "pending", err, backoff)


async def worker(conn: asyncpg.Connection, stop: asyncio.Event, fail: Fail) -> None:
    """The document's workerLoop."""
    while not stop.is_set():
        batch = await conn.fetch(CLAIM)  # step claim: commits at once
        if not batch:
            with contextlib.suppress(TimeoutError):  # named: the document's poll sleep
                await within(stop.wait(), POLL_MS / 1000)
            continue
        for job in batch:
            await conn.execute(LOG, job["id"], job["attempts"], "claimed")
            try:  # step run
                await handle(job["kind"])
                await conn.execute(DONE, job["id"])  # step done
                await conn.execute(LOG, job["id"], job["attempts"], "done")
            except JobError as exc:  # step fail: the variant's failure path
                await fail(conn, job, str(exc))


async def run(env: Env, fail: Fail) -> None:
    hung, *conns = [await env.connect() for _ in range(WORKERS + 1)]
    await env.db.execute("INSERT INTO jobs (kind) VALUES ('stuck'), ('poison')")  # step enqueue
    await hung.execute(  # step hang: a worker claims the stuck job; its handler never returns
        f"UPDATE jobs SET status = 'running', attempts = 1, locked_until = now() +"
        f" interval '{LEASE_MS} ms' WHERE id = {STUCK}"
    )
    stuck_at = time.perf_counter()
    await env.db.execute(  # step enqueue: the healthy jobs, coming due as the workers start
        f"INSERT INTO jobs (kind, run_at) SELECT 'email', now() + i * interval '{SPREAD_MS} ms'"
        f" FROM generate_series(1, {HEALTHY_JOBS}) i"
    )
    stop = asyncio.Event()
    tasks = [asyncio.create_task(worker(c, stop, fail)) for c in conns]
    deadline = time.perf_counter() + RUN_WINDOW_MS / 1000
    try:
        while time.perf_counter() < deadline and not any(t.done() for t in tasks):
            left = await env.db.fetchval(
                "SELECT count(*) FROM jobs WHERE id <> $1 AND status NOT IN ('done', 'failed')",
                STUCK,
            )
            if left == 0:
                break
            await asyncio.sleep(POLL_MS / 1000)  # named: the lab's own poll of the queue
        stop.set()
        await asyncio.gather(*tasks)
        alert = await env.db.fetchrow(ALERT)  # step alert: the oldest running job
        stuck_ms = (time.perf_counter() - stuck_at) * 1000
    finally:
        stop.set()
        for c in (hung, *conns):
            c.terminate()
    await evidence(env, alert, stuck_ms)


async def evidence(env: Env, alert: asyncpg.Record | None, stuck_ms: float) -> None:
    jobs = await env.db.fetch("SELECT id, kind, status, attempts FROM jobs ORDER BY id")
    for j in jobs:
        env.outcome(j["status"])
    ms = "extract(epoch FROM at - (SELECT min(at) FROM job_log)) * 1000"
    tries = await env.db.fetch(
        f"SELECT {ms} AS t FROM job_log WHERE job_id = $1 AND event = 'claimed' ORDER BY at",
        POISON,
    )
    at = [float(r["t"]) for r in tries]
    waits = await env.db.fetch(  # each healthy job: from coming due to done, and when
        f"SELECT extract(epoch FROM l.at - j.run_at) * 1000 AS wait, {ms} AS t"
        " FROM jobs j JOIN job_log l ON l.job_id = j.id AND l.event = 'done'"
        " WHERE j.kind = 'email'"
    )
    poison = next(j for j in jobs if j["id"] == POISON)
    env.extra_evidence.update(
        poison={
            "status": poison["status"],
            "attempts": poison["attempts"],
            "at_ms": at[:8],
            "gaps_ms": [round(b - a, 1) for a, b in itertools.pairwise(at)][:8],
        },
        healthy={
            "jobs": HEALTHY_JOBS,
            "done": len(waits),
            "max_wait_ms": round(max((float(w["wait"]) for w in waits), default=-1), 1),
            "during_retries": sum(1 for w in waits if at and at[0] < w["t"] < at[-1]),
        },
        alert={
            "id": alert["id"] if alert else None,
            "running_ms": round(float(alert["running_ms"]), 1) if alert else None,
            "lab_ms": round(stuck_ms, 1),
        },
    )


async def buggy(env: Env) -> None:
    await run(env, fail_buggy)


async def fixed(env: Env) -> None:
    await run(env, fail_fixed)  # the whole fix: the failure path


# --- claims -------------------------------------------------------------------------------


def _poison_failed(records: Mapping[str, Record]) -> tuple[bool, str]:
    p = records["fixed"]["evidence"]["poison"]
    due = [2**a * BACKOFF_UNIT_MS for a in range(1, MAX_ATTEMPTS)]
    # Judged from below only (a loaded machine may run an attempt late by any amount): each
    # gap is at least its backoff, and so longer than the backoff before it, which doubles.
    timely = all(g >= d for g, d in zip(p["gaps_ms"], due, strict=False))
    growing = all(g > d for g, d in zip(p["gaps_ms"][1:], due, strict=False))
    held = p["status"] == "failed" and p["attempts"] == MAX_ATTEMPTS == len(p["at_ms"])
    return held and timely and growing and len(p["gaps_ms"]) == len(due), (
        f"fixed: poison job {p['status']} after {p['attempts']} attempts; gaps "
        f"{p['gaps_ms']} ms (backoff {due} ms)"
    )


def _retried_forever(records: Mapping[str, Record]) -> tuple[bool, str]:
    p = records["buggy"]["evidence"]["poison"]
    first = sum(p["gaps_ms"][: MAX_ATTEMPTS - 1])  # shown, not judged: an upper time bound
    held = p["status"] != "failed" and p["attempts"] > 2 * MAX_ATTEMPTS
    return held, (
        f"buggy: poison job still {p['status']} after {p['attempts']} attempts in the "
        f"{RUN_WINDOW_MS} ms run (the backoff allows {MAX_ATTEMPTS} in {SCHEDULE_MS} ms); its "
        f"first {MAX_ATTEMPTS} came within {first:.1f} ms"
    )


def _flow(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        h = records[variant]["evidence"]["healthy"]
        # the wait after coming due is shown, not judged: an upper time bound
        held = h["done"] == h["jobs"] and h["during_retries"] > 0
        return held, (
            f"{variant}: {h['done']}/{h['jobs']} healthy jobs done, at most {h['max_wait_ms']} ms "
            f"after coming due; {h['during_retries']} of them between the poison job's attempts"
        )

    return Claim("LC-30", f"{variant}: the other jobs keep flowing", (variant,), check)


def _alert(records: Mapping[str, Record]) -> tuple[bool, str]:
    a = records["fixed"]["evidence"]["alert"]
    at = records["fixed"]["evidence"]["poison"]["at_ms"]
    span = at[-1] - at[0] if at else None  # server clock; the stuck job was claimed before
    # the first attempt and the alert ran after the last, so its age is at least this span
    held = (
        a["id"] == STUCK
        and a["running_ms"] is not None
        and span is not None
        and a["running_ms"] >= span
    )
    return held, (
        f"fixed: oldest running job {a['id']}, running for {a['running_ms']} ms by the alert "
        f"query, at least the {span if span is None else round(span, 1)} ms of the poison job's "
        f"attempts; {a['lab_ms']} ms by the lab's clock since its claim (shown, not judged)"
    )


CLAIMS = (
    Claim(
        "LC-30",
        f"fixed: a poison job is failed after exactly {MAX_ATTEMPTS} attempts, each gap at "
        "least 2^attempts × the backoff unit, so longer than the backoff before it",
        ("fixed",),
        _poison_failed,
        published="const failed = job.attempts >= 5; ... 2 ** job.attempts * 10 (seconds)",
    ),
    Claim(
        "LC-30",
        "buggy: retried at once and without a cap, it is never failed and is attempted more "
        f"than {2 * MAX_ATTEMPTS} times (the fixed path stops at {MAX_ATTEMPTS})",
        ("buggy",),
        _retried_forever,
    ),
    _flow("fixed"),
    _flow("buggy"),
    Claim(
        "LC-30",
        "fixed: the alert on the oldest running job reports the stuck job, its age at least "
        "the span of the retries that ran while it was stuck",
        ("fixed",),
        _alert,
        published="Cần alert trên tuổi của job running lâu nhất.",
    ),
)

SCENARIO = Scenario(
    id="job-retry",
    doc=__doc__ or "",
    kind="script",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("done", "failed", "pending", "running"),
    claims=CLAIMS,
    published={"fixed": "failed after 5 attempts, run_at = now() + 2^attempts × 10 s"},
    setup=setup,
    defaults=Defaults(n=1, run_timeout_s=60),
    script_connections=lambda n: WORKERS + 1,
    sources=("LC",),
)
