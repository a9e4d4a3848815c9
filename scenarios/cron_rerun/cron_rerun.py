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
            own, one granted step at a time); choreography.py (a trial: the race, crash,
            retry) and trials.py (their summary, the invariant); schedules.py (pinned).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
from asyncpg.transaction import Transaction

from lab.core.scenario import Env
from lab.core.steps import Session, show_sql

PERIOD = "2026-09"
AMOUNT = 100
LOCK = "billing"
TRY_LOCK = "SELECT pg_try_advisory_lock(hashtext($1))"
TRY_XACT_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext($1))"
UNLOCK = "SELECT pg_advisory_unlock(hashtext($1))"
INSERT = "INSERT INTO invoices (customer_id, period, amount, billed_by) VALUES ($1, $2, $3, $4)"
ON_CONFLICT = " ON CONFLICT (customer_id, period) DO NOTHING"

Report = Callable[[dict[str, Any]], None]  # one event to the lab (trials); pinned: none


@dataclass(frozen=True)
class Fix:
    unique: bool  # UNIQUE (customer_id, period) + ON CONFLICT DO NOTHING
    xact_lock: bool  # pg_try_advisory_xact_lock, the whole job in one transaction
    locks: bool = True  # False only in the mutant: the job takes no advisory lock at all


FIXES = {"buggy": Fix(unique=False, xact_lock=False), "fixed": Fix(unique=True, xact_lock=False)}
FIXES["fixed-xact-lock"] = Fix(unique=True, xact_lock=True)
# A code mutant (Scenario.mutants, read only as a counterfactual): buggy's job with the
# advisory lock dropped, so what DL-15 says the lock does can be seen undone on the server.
NO_LOCK = "mutant-no-lock"
MUTANTS = {NO_LOCK: Fix(unique=False, xact_lock=False, locks=False)}


async def setup(env: Env) -> None:
    unique = ", UNIQUE (customer_id, period)" if {**FIXES, **MUTANTS}[env.variant].unique else ""
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
    locks: bool = True  # the mutant's job takes no lock (its "lock" step only says so)


@dataclass
class Billed:
    inserted: int = 0  # rows this run inserted
    conflicts: int = 0  # customers it found billed already (ON CONFLICT: no-op)


async def run_job(s: Session, job: Job, report: Report) -> Billed | None:
    """The cron job, the document's: try the lock, bill everyone, unlock. None: skipped.
    Each step (lock, bill-1..N, finish) waits for the lab's grant: a crash lands between."""
    tx = s.conn.transaction() if job.xact_lock else None  # the fix's variant: one transaction
    sql = TRY_XACT_LOCK if tx else TRY_LOCK
    shown = ("BEGIN; " if tx else "") + show_sql(sql, [LOCK])
    try:
        if not job.locks:  # the mutant: the same step, no lock taken
            await s.step("lock", _no_lock, report, shown="-- no lock", result=_said)
        elif not await s.step("lock", _try, s.conn, tx, sql, report, shown=shown, result=_said):
            return None
        billed = await _bill(s, job, report)
        if tx:  # a crash before this step loses the whole transaction
            await s.step("finish", tx.commit, shown="COMMIT", result=lambda _: "COMMIT")
        else:
            shown = show_sql(UNLOCK, [LOCK])
            await s.step("finish", s.conn.fetchval, UNLOCK, LOCK, shown=shown, result=_said)
    finally:  # not locked, or failed: the transaction ends with nothing done
        if tx and s.conn.is_in_transaction():
            await tx.rollback()
    report({"ev": "done", "inserted": billed.inserted, "conflicts": billed.conflicts})
    return billed


async def pod(env: Env, s: Session) -> str:
    """One pod under a schedule (lab/pinned/stage.py: in a process of its own)."""
    unique, xact = FIXES[env.variant].unique, FIXES[env.variant].xact_lock
    billed = await run_job(s, Job(s.name, env.params["customers"], unique, xact), _no_report)
    return "skipped" if billed is None else "billed"


def _no_report(event: dict[str, Any]) -> None:
    return None


def _said(got: bool) -> str:  # the lock's answer (the unlock's: true)
    return "true" if got else "false (lock held)"


async def _try(conn: asyncpg.Connection, tx: Transaction | None, sql: str, report: Report) -> bool:
    if tx is not None:
        await tx.start()
    sent_at = time.perf_counter()  # CLOCK_MONOTONIC: comparable with the lab's clock
    got = bool(await conn.fetchval(sql, LOCK))
    report({"ev": "locked" if got else "skipped", "sent_at": sent_at})
    return got


async def _no_lock(report: Report) -> bool:
    report({"ev": "locked", "sent_at": time.perf_counter()})
    return True


async def _bill(s: Session, job: Job, report: Report) -> Billed:
    sql = INSERT + (ON_CONFLICT if job.unique else "")  # the fix: the business key decides
    billed = Billed()
    for c in range(1, job.customers + 1):  # a step each: the lab SIGKILLs pod-1 between two
        args = (c, PERIOD, AMOUNT, job.pod)
        shown, said = show_sql(sql, args), lambda r: f"INSERT 0 {int(r[0])}"
        inserted, ms = await s.step(
            f"bill-{c}", _insert, s.conn, sql, args, shown=shown, result=said
        )
        billed.inserted += inserted
        billed.conflicts += not inserted
        report({"ev": "billed", "customer": c, "inserted": inserted, "ms": ms})
        if job.pause_ms:
            await asyncio.sleep(job.pause_ms / 1000)  # time is the subject: the payment call
    return billed


async def _insert(conn: asyncpg.Connection, sql: str, args: tuple[Any, ...]) -> tuple[bool, float]:
    t0 = time.perf_counter()
    inserted = await conn.execute(sql, *args) == "INSERT 0 1"
    return inserted, (time.perf_counter() - t0) * 1000  # and what it took, ms
