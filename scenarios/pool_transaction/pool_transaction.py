"""Pool transaction: BEGIN, UPDATE and ROLLBACK each sent through the pool are no transaction.

Symptom:    a ROLLBACK does not undo an UPDATE, and a row read FOR UPDATE is locked by
            another request before the "transaction" commits.
Root cause: `pool.execute('BEGIN')`, `pool.execute(UPDATE)`, `pool.execute('ROLLBACK')` each
            check out a connection for one statement and give it back: there is no
            transaction to undo, and a FOR UPDATE lock ends with its own statement.
Fix:        one connection for the whole transaction, the document's `withTx` helper:
            acquire a client, BEGIN .. COMMIT/ROLLBACK on it, release it (fixed).
Published:  withTx "dùng một client cho cả transaction (dùng pool.query cho từng câu sẽ chạy
            mỗi câu trên connection khác nhau)" — locking-concurrency-control.vi.txt (the
            transaction helper)
See:        claim LC-26 in claims.py. The application's pool is asyncpg's, two connections. asyncpg
            rolls back a connection released inside a transaction (it reports "Resetting connection
            with an active transaction" to the event loop; recorded), so each statement is its
            own transaction even when the pool hands back the same connection; node-postgres
            leaves the BEGIN open on the first client instead (an idle-in-transaction session)
            and the next statement lands on whichever client is free. Either way the ROLLBACK
            undoes nothing. The lock half: the "transaction" reads the row FOR UPDATE, then
            another request asks for it with NOWAIT; 55P03 means the lock was still held.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from lab.core.scenario import Env

BALANCE = 1000
UPDATE = "UPDATE accounts SET balance = balance - 100 WHERE id = 1"
LOCK = "SELECT balance FROM accounts WHERE id = 1 FOR UPDATE"
PROBE = "SELECT balance FROM accounts WHERE id = 1 FOR UPDATE NOWAIT"
UNDONE = "undone"
NOT_UNDONE = "not_undone"
LOCK_HELD = "lock_held"
LOCK_NOT_HELD = "lock_not_held"


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)")
    await env.db.execute("INSERT INTO accounts VALUES (1, $1)", BALANCE)


async def probe(other: asyncpg.Connection) -> bool:
    """Another request: is the row locked? NOWAIT fails with 55P03 at once if so."""
    try:
        async with other.transaction():
            await other.fetch(PROBE)
    except asyncpg.LockNotAvailableError:
        return True
    return False


async def on_the_pool(pool: asyncpg.Pool, other: asyncpg.Connection) -> bool:
    """buggy: every statement through the pool."""
    await pool.execute("BEGIN")  # step begin
    await pool.execute(UPDATE)  # step update
    await pool.execute("ROLLBACK")  # step rollback: "there is no transaction in progress"
    await pool.execute("BEGIN")  # step begin-2
    await pool.fetch(LOCK)  # step lock: the "transaction" reads FOR UPDATE
    locked = await probe(other)  # step probe
    await pool.execute("COMMIT")  # step commit
    return locked


async def with_tx(pool: asyncpg.Pool, other: asyncpg.Connection) -> bool:
    """fixed: the same statements on one client per transaction (withTx)."""
    async with pool.acquire() as c:
        tx = c.transaction()
        await tx.start()  # step begin
        await c.execute(UPDATE)  # step update
        await tx.rollback()  # step rollback
    async with pool.acquire() as c, c.transaction():  # step begin-2
        await c.fetch(LOCK)  # step lock
        return await probe(other)  # step probe; commit on leaving


async def _run(env: Env, body: Any) -> None:
    pool = await asyncpg.create_pool(env.dsn, min_size=2, max_size=2)
    other = await env.connect()
    loop = asyncio.get_running_loop()
    notes: list[str] = []  # what asyncpg reports when a connection comes back mid-transaction
    loop.set_exception_handler(lambda _l, ctx: notes.append(str(ctx.get("message")).split(" <")[0]))
    try:
        locked = await body(pool, other)
    finally:
        loop.set_exception_handler(None)
        await other.close()
        await pool.close()
    balance = await env.db.fetchval("SELECT balance FROM accounts WHERE id = 1")
    env.outcome(UNDONE if balance == BALANCE else NOT_UNDONE)
    env.outcome(LOCK_HELD if locked else LOCK_NOT_HELD)
    env.extra_evidence.update(balance_after_rollback=balance, row_locked=locked, asyncpg=notes)


async def buggy(env: Env) -> None:
    await _run(env, on_the_pool)


async def fixed(env: Env) -> None:
    await _run(env, with_tx)
