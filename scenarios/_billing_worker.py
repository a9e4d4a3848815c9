"""The cron-rerun billing job, and the pod process that runs it one granted step at a time.

The job is the document's: try the advisory lock, bill every customer, unlock. The fix
adds ``ON CONFLICT (customer_id, period) DO NOTHING`` (the table has the UNIQUE); the
xact variant takes ``pg_try_advisory_xact_lock`` and runs the whole job in one transaction.

Run as a script (``python _billing_worker.py``) it is one pod, with its own asyncpg
connection, on the harness's worker protocol (``lab.workers``: it dies with the lab). Its
config is the job; it connects at once and reports ``connected``, or (``lazy``) connects
when granted its first step. Then every step waits for a grant of the step ``go``: try the
lock, bill customer 1..N, finish (unlock or commit). Every step is reported as an event.
The parent crashes the pod with SIGKILL while it waits for a grant; nothing here knows
whether that will come. Only asyncpg, the standard library and lab.workers are imported,
so the process starts fast.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import asyncpg

from lab.workers import Child, run_child

LOCK = "billing"
TRY_LOCK = "SELECT pg_try_advisory_lock(hashtext($1))"
TRY_XACT_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext($1))"
UNLOCK = "SELECT pg_advisory_unlock(hashtext($1))"
INSERT = "INSERT INTO invoices (customer_id, period, amount, billed_by) VALUES ($1, $2, $3, $4)"
ON_CONFLICT = " ON CONFLICT (customer_id, period) DO NOTHING"

Report = Callable[[dict[str, Any]], None]
Gate = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Job:
    """One pod's billing run."""

    pod: str
    customers: int  # customer ids 1..customers
    period: str
    amount: int
    on_conflict: bool  # the fix: INSERT ... ON CONFLICT (customer_id, period) DO NOTHING
    xact_lock: bool  # pg_try_advisory_xact_lock, the whole job in one transaction
    pause_ms: float = 0.0  # other work per customer (the payment call), lock held

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def steps(self) -> int:
        """Grants the whole job needs: the lock, every customer, the finish."""
        return self.customers + 2


@dataclass
class Billed:
    """What a run that got the lock did: rows inserted, customers found already billed."""

    inserted: int = 0
    conflicts: int = 0


async def run_job(conn: asyncpg.Connection, job: Job, report: Report, gate: Gate) -> Billed | None:
    """The cron job; None when another pod holds the lock (skipped)."""
    await gate()
    if job.xact_lock:
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
    sent_at = time.perf_counter()  # CLOCK_MONOTONIC: comparable with the parent's clock
    got = bool(await conn.fetchval(sql, LOCK))
    report({"ev": "locked" if got else "skipped", "sent_at": sent_at})
    return got


async def _bill(conn: asyncpg.Connection, job: Job, report: Report, gate: Gate) -> Billed:
    sql = INSERT + (ON_CONFLICT if job.on_conflict else "")
    billed = Billed()
    for customer in range(1, job.customers + 1):
        await gate()
        t0 = time.perf_counter()
        status = await conn.execute(sql, customer, job.period, job.amount, job.pod)
        ms = (time.perf_counter() - t0) * 1000
        inserted = status == "INSERT 0 1"
        billed.inserted += inserted
        billed.conflicts += not inserted
        report({"ev": "billed", "customer": customer, "inserted": inserted, "ms": ms})
        if job.pause_ms:
            await asyncio.sleep(job.pause_ms / 1000)
    return billed


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
        child.emit("connected", backend_pid=conn.get_server_pid(),
                   connect_ms=(time.perf_counter() - t0) * 1000)  # fmt: skip
        await run_job(conn, job, report, gate)
        await conn.close()
    except (asyncpg.PostgresError, OSError) as exc:
        child.emit("error", error=f"{getattr(exc, 'sqlstate', '')} {type(exc).__name__}: {exc}")
        raise SystemExit(1) from exc


if __name__ == "__main__":
    run_child(main)
