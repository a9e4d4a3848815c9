"""lab/pinned/interleave.py on a real server: a blocked session is seen with its blocker,
waits are bounded."""

from __future__ import annotations

import asyncio

import asyncpg
from asyncpg.transaction import Transaction

from lab.pinned.interleave import (
    done_or_blocked,
    lock_waiters,
    task_or_blocked,
)


async def _waiting_update(
    holder: asyncpg.Connection, waiter: asyncpg.Connection, v: int
) -> tuple[Transaction, asyncio.Task[str]]:
    """`holder` locks row 1 in a transaction left open; `waiter`'s UPDATE of the row, as a
    task (it waits for the lock)."""
    tx = holder.transaction()
    await tx.start()
    await holder.execute("SELECT * FROM t WHERE id = 1 FOR UPDATE")
    return tx, asyncio.create_task(waiter.execute("UPDATE t SET v = $1 WHERE id = 1", v))


async def test_done_or_blocked_names_the_blocker(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """A session waiting on a row lock is reported with the pid holding it; a done event wins."""
    holder, waiter = sessions
    tx, task = await _waiting_update(holder, waiter, 10)
    never = asyncio.Event()
    by = await done_or_blocked(db, waiter.get_server_pid(), never, timeout=5)
    assert by == [holder.get_server_pid()]
    waits = await lock_waiters(db, [waiter.get_server_pid()])
    assert waits == {waiter.get_server_pid(): [holder.get_server_pid()]}
    assert await lock_waiters(db, [holder.get_server_pid()]) == {}
    await tx.commit()
    await task
    done = asyncio.Event()
    done.set()
    assert await done_or_blocked(db, waiter.get_server_pid(), done) is None


async def test_task_or_blocked_follows_a_statement(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """A statement's task: its blockers while it waits on a row lock, None once it is done."""
    holder, waiter = sessions
    tx, task = await _waiting_update(holder, waiter, 11)
    assert await task_or_blocked(db, waiter.get_server_pid(), task, timeout=5) == [
        holder.get_server_pid()
    ]
    await tx.commit()
    assert await task_or_blocked(db, waiter.get_server_pid(), task, timeout=5) is None
    assert task.result() == "UPDATE 1"
