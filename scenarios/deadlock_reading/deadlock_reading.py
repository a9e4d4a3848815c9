"""Deadlock reading: pg_locks, log_lock_waits and the monitoring queries around one deadlock.

Symptom:    a billing run deadlocked overnight: one job was retried and billed a customer
            twice, its first attempt is still "running", and all that is left to go on is the
            server log and a few catalog views.
Root cause: two billing jobs reserve the same two SKUs in opposite order (one per cart);
            the job writes its invoice before the checkout transaction, the deadlock victim's
            job is rerun by the scheduler and writes a second invoice (no UNIQUE), and the
            failed attempt's job row is never marked done.
Fix:        sort the SKUs (no cycle) and `UNIQUE (customer_id, period)` with ON CONFLICT DO
            NOTHING (fixed): no deadlock, no duplicate, nothing left running.
Published:  "'Waits for ShareLock on transaction X' nghĩa là: tôi cần update một tuple mà
            transaction X đang giữ row lock ... Ghép lại"; "Production: bật log_lock_waits =
            on, alert theo số 40P01/phút, và invariant query định kỳ (invoice trùng theo
            (customer, period))" — deadlock-distributed-lock-cron.vi.txt; "Cần alert trên tuổi
            của job running lâu nhất" — locking-concurrency-control.vi.txt ("Gotchas")
See:        DL-22, DL-23 in claims.py (with the monitoring queries). Both jobs' sessions SET
            log_lock_waits = on, deadlock_timeout = 500 ms. Forced order: j1 takes its first
            SKU, j2 its first, j1 asks for its second; j2's "other logic" lasts until the server
            shows j1 waiting LOG_AFTER deadlock_timeouts (time is the subject: the log's
            threshold), so j1 logs "still waiting"; then j2 asks for its second SKU, the lab
            waits until both are blocked and snapshots pg_locks; j2 is the victim, j1 "acquired".
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from lab.aio import until
from lab.core.scenario import Env
from lab.pinned.interleave import POLL_S, TIMEOUT_S, done_or_blocked, lock_waiters, task_or_blocked

SKUS = ("A-1", "B-2")
PERIOD = "2026-11"
DEADLOCK_TIMEOUT_MS = 500
LOG_AFTER = 1.5  # j1 must have waited this many deadlock_timeouts: its "still waiting" is out
SESSION = {"log_lock_waits": "on", "deadlock_timeout": f"{DEADLOCK_TIMEOUT_MS}ms"}
SNAPSHOT = """
SELECT w.pid AS waiter, w.mode, 'transaction ' || w.transactionid AS on, h.pid AS holder
FROM pg_locks w JOIN pg_locks h ON h.locktype = 'transactionid'
  AND h.transactionid = w.transactionid AND h.granted
WHERE w.locktype = 'transactionid' AND NOT w.granted AND w.pid = ANY($1::int[])
ORDER BY w.pid
"""
WAITED_MS = """SELECT extract(epoch FROM clock_timestamp() - waitstart) * 1000
FROM pg_locks WHERE pid = $1 AND NOT granted AND waitstart IS NOT NULL"""


async def setup(env: Env) -> None:
    await env.db.execute(
        "CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL);"
        "CREATE TABLE invoices (id serial PRIMARY KEY, customer_id int NOT NULL, period "
        "text NOT NULL);"
        "CREATE TABLE jobs (id serial PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL,"
        " started_at timestamptz NOT NULL DEFAULT now())"
    )
    await env.db.executemany("INSERT INTO stock VALUES ($1, 1000)", [(s,) for s in SKUS])


async def bill(
    conn: asyncpg.Connection,
    customer: int,
    cart: tuple[str, ...],
    fix: bool,
    first_done: asyncio.Event,
    go: asyncio.Event,
) -> str:
    """One billing job: job row, invoice, reserve the cart's SKUs, job done."""
    job = await conn.fetchval(  # step start: the job row, committed
        "INSERT INTO jobs (customer_id, status) VALUES ($1, 'running') RETURNING id", customer
    )
    await conn.execute(  # step invoice: committed before the checkout, as the job does
        "INSERT INTO invoices (customer_id, period) VALUES ($1, $2)"
        + (" ON CONFLICT (customer_id, period) DO NOTHING" if fix else ""),
        customer,
        PERIOD,
    )
    async with conn.transaction():
        skus = sorted(cart) if fix else cart
        await conn.execute("UPDATE stock SET qty = qty - 1 WHERE sku = $1", skus[0])  # step first
        first_done.set()
        await go.wait()  # the job's other logic; the lab decides when it ends
        await conn.execute("UPDATE stock SET qty = qty - 1 WHERE sku = $1", skus[1])  # step second
    await conn.execute("UPDATE jobs SET status = 'done' WHERE id = $1", job)  # step done
    return "ok"


async def attempt(conn: asyncpg.Connection, *args: Any) -> str:
    try:
        return await bill(conn, *args)
    except asyncpg.PostgresError as exc:
        return str(exc.sqlstate)


async def _run(env: Env, fix: bool) -> None:
    if fix:  # the schema half of the fix
        await env.db.execute("ALTER TABLE invoices ADD UNIQUE (customer_id, period)")
    conns = [await env.connect(server_settings=SESSION) for _ in (0, 1)]
    pids = env.state["pids"] = [c.get_server_pid() for c in conns]
    firsts, gos = [asyncio.Event(), asyncio.Event()], [asyncio.Event(), asyncio.Event()]
    carts = (SKUS, SKUS[::-1])
    tasks: list[asyncio.Task[str]] = []

    async def waited_long() -> bool:  # the server shows j1 waiting LOG_AFTER deadlock_timeouts
        return (await env.db.fetchval(WAITED_MS, pids[0]) or 0) >= LOG_AFTER * DEADLOCK_TIMEOUT_MS

    async def both_blocked() -> bool:
        return len(await lock_waiters(env.db, pids)) == 2 or tasks[1].done()

    try:
        for i in (0, 1):  # j1 takes its first SKU before j2 starts
            tasks.append(
                asyncio.create_task(attempt(conns[i], i + 1, carts[i], fix, firsts[i], gos[i]))
            )
            await done_or_blocked(env.db, pids[i], firsts[i], what=f"j{i + 1} first")
        gos[0].set()
        if await task_or_blocked(env.db, pids[0], tasks[0], what="j1 second") is not None:
            await until(waited_long, TIMEOUT_S, "j1 to wait past deadlock_timeout", every=POLL_S)
        gos[1].set()
        if not tasks[0].done():  # buggy: both blocked once j2 asks; snapshot the cycle
            await until(both_blocked, TIMEOUT_S, "both jobs blocked", every=POLL_S)
            env.state["snapshot"] = [dict(r) for r in await env.db.fetch(SNAPSHOT, pids)]
        for i, end in enumerate(await asyncio.gather(*tasks)):
            env.outcome(end)
            if end == "40P01":  # the scheduler reruns the failed job
                go = asyncio.Event()
                go.set()
                env.outcome(f"rerun {await attempt(conns[i], i + 1, carts[i], fix, go, go)}")
    finally:
        for t in tasks:
            t.cancel()
        for conn in conns:
            await conn.close()  # a backend's stats are flushed by the time it is gone


async def buggy(env: Env) -> None:
    await _run(env, fix=False)


async def fixed(env: Env) -> None:
    await _run(env, fix=True)
