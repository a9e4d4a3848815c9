"""Cron rerun: an advisory lock stops a concurrent run, not a rerun after a crash.

Symptom:    the nightly billing CronJob "ran twice": customers have two invoices for the
            same period, although the job holds pg_try_advisory_lock(hashtext('billing')).
Root cause: the lock only excludes runs that overlap. pod-1 is SIGKILLed after billing k
            customers; the server drops its session lock when it sees the connection
            die, and the Job's retry takes the lock and bills everyone again. A pod-2 slow
            to connect arrives after pod-1's lock is gone and bills too.
Fix:        idempotency by business key: UNIQUE (customer_id, period) + INSERT ... ON
            CONFLICT DO NOTHING (fixed); the same with pg_try_advisory_xact_lock and the
            whole job in one transaction (fixed-xact-lock): a crashed run rolls back, but
            the job keeps a transaction open, holding the xmin horizon, all along.
Published:  [ 'pod-1: billed 5', 'pod-2: skipped (lock held)' ]; job retry after crash
            (sequential): billed 5; invoices without unique: 10. With UNIQUE: retry billed
            0; invoices with UNIQUE(customer_id, period): 5. pod-2 >100 ms to connect
            (SCRAM): both pods billed 5 (PostgreSQL 17.11, Node 24 + node-postgres) —
            deadlock-distributed-lock-cron.vi.txt
See:        claims DL-15..DL-18, LC-3 in claims.py; pod.py (`run_job` in a process of its
            own, one granted step at a time); choreography.py (the race, crash, retry).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from lab.core.scenario import Check, Env

PERIOD, AMOUNT, LOCK = "2026-09", 100, "billing"
TRY_LOCK = "SELECT pg_try_advisory_lock(hashtext($1))"
TRY_XACT_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext($1))"
UNLOCK = "SELECT pg_advisory_unlock(hashtext($1))"
INSERT = "INSERT INTO invoices (customer_id, period, amount, billed_by) VALUES ($1, $2, $3, $4)"
ON_CONFLICT = " ON CONFLICT (customer_id, period) DO NOTHING"

Report = Callable[[dict[str, Any]], None]  # one event to the lab
Gate = Callable[[], Awaitable[None]]  # a step point: the pod waits here for the lab's grant


@dataclass(frozen=True)
class Fix:
    unique: bool  # UNIQUE (customer_id, period) + ON CONFLICT DO NOTHING
    xact_lock: bool  # pg_try_advisory_xact_lock, the whole job in one transaction


FIXES = {"buggy": Fix(unique=False, xact_lock=False), "fixed": Fix(unique=True, xact_lock=False)}
FIXES["fixed-xact-lock"] = Fix(unique=True, xact_lock=True)


async def setup(env: Env) -> None:
    unique = ", UNIQUE (customer_id, period)" if FIXES[env.variant].unique else ""
    await env.db.execute(f"""CREATE TABLE invoices (customer_id int NOT NULL, period text NOT NULL,
  amount int NOT NULL, billed_by text NOT NULL{unique})""")


@dataclass(frozen=True)
class Job:
    """One pod's billing run (sent to its process as JSON)."""

    pod: str
    customers: int  # customer ids 1..customers
    unique: bool
    xact_lock: bool
    pause_ms: float = 0.0  # other work per customer (the payment call), lock held

    @property
    def steps(self) -> int:  # the grants the whole job takes: the lock, each customer, the end
        return self.customers + 2


@dataclass
class Billed:
    inserted: int = 0  # rows this run inserted
    conflicts: int = 0  # customers it found billed already (ON CONFLICT: no-op)


async def run_job(conn: asyncpg.Connection, job: Job, report: Report, gate: Gate) -> Billed | None:
    """The cron job, the document's: try the lock, bill everyone, unlock. None: skipped."""
    await gate()
    if job.xact_lock:  # the fix's variant: the lock and the whole job in one transaction
        async with conn.transaction():
            if not await _try(conn, TRY_XACT_LOCK, report):
                return None
            billed = await _bill(conn, job, report, gate)
            await gate()  # a crash here loses the whole transaction
    else:
        if not await _try(conn, TRY_LOCK, report):
            return None
        billed = await _bill(conn, job, report, gate)
        await gate()
        await conn.fetchval(UNLOCK, LOCK)
    report({"ev": "done", "inserted": billed.inserted, "conflicts": billed.conflicts})
    return billed


async def _try(conn: asyncpg.Connection, sql: str, report: Report) -> bool:
    sent_at = time.perf_counter()  # CLOCK_MONOTONIC: comparable with the lab's clock
    got = bool(await conn.fetchval(sql, LOCK))
    report({"ev": "locked" if got else "skipped", "sent_at": sent_at})
    return got


async def _bill(conn: asyncpg.Connection, job: Job, report: Report, gate: Gate) -> Billed:
    sql = INSERT + (ON_CONFLICT if job.unique else "")  # the fix: the business key decides
    billed = Billed()
    for customer in range(1, job.customers + 1):
        await gate()  # the crash point: the lab SIGKILLs pod-1 here after customer k
        t0 = time.perf_counter()
        inserted = await conn.execute(sql, customer, PERIOD, AMOUNT, job.pod) == "INSERT 0 1"
        billed.inserted += inserted
        billed.conflicts += not inserted
        ms = (time.perf_counter() - t0) * 1000
        report({"ev": "billed", "customer": customer, "inserted": inserted, "ms": ms})
        if job.pause_ms:
            await asyncio.sleep(job.pause_ms / 1000)  # time is the subject: the payment call
    return billed


COUNTS = """SELECT coalesce(sum(n), 0)::int AS invoices, count(*)::int AS customers_invoiced,
  coalesce(max(n), 0) AS max_per_key FROM (SELECT customer_id, count(*) AS n FROM invoices
  WHERE period = $1 GROUP BY customer_id) per_key"""


async def invariant(env: Env) -> list[Check]:
    """Checked on the table after the last trial, and on every earlier trial's counts."""
    n = env.params["customers"]
    last = await env.db.fetchrow(COUNTS, PERIOD)
    assert last is not None
    trials = list(env.extra_evidence.get("trials", []))
    if trials:  # the table holds the last trial: judge that one from the database itself
        trials[-1] = {**trials[-1], **dict(last)}
    dup = [t for t in trials if t["max_per_key"] > 1]
    missing = [t for t in trials if t["customers_invoiced"] != n]
    shown = (dup or trials or [{"trial": 0, "invoices": 0, "max_per_key": 0}])[0]
    twice = (
        f"{len(dup)}/{len(trials)} trials with duplicates; trial {shown['trial']}: "
        f"{shown['invoices']} invoices for {n} customers, up to {shown['max_per_key']} per "
        "(customer, period)"
    )
    all_n = f"{len(trials) - len(missing)}/{len(trials)} trials invoiced all {n} customers"
    return [
        Check("one invoice per (customer, period)", bool(trials) and not dup, twice),
        Check("every customer invoiced after the retry", bool(trials) and not missing, all_n),
    ]
