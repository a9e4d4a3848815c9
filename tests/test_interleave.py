"""lab/pinned/interleave.py on a real server: blocked sessions count as arrived, waits are bounded."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from asyncpg.transaction import Transaction

from lab.pinned.interleave import (
    InterleaveTimeout,
    Rendezvous,
    done_or_blocked,
    lock_waiters,
    task_or_blocked,
)


async def test_a_party_blocked_on_a_lock_counts_as_arrived(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """Party 0 holds the row, party 1 blocks in its UPDATE: party 0 goes on and commits first."""
    a, b = sessions
    rv = Rendezvous(db, 2, ("write",), timeout=5)
    order: list[str] = []
    first_wrote = asyncio.Event()

    async def party(i: int, conn: asyncpg.Connection) -> None:
        with rv.party(i, conn.get_server_pid()):
            async with conn.transaction():
                if i == 1:
                    await first_wrote.wait()  # party 0 takes the row first
                await conn.execute("UPDATE t SET v = v + 1 WHERE id = 1")
                order.append(f"{i} wrote")
                first_wrote.set()
                blocked = await rv.arrive(i, "write")
                order.append(f"{i} passed, saw blocked {sorted(blocked)}")
            order.append(f"{i} committed")

    await asyncio.gather(party(0, a), party(1, b))
    # Party 1 writes only after party 0 passed (the server held it); what it does after
    # party 0's COMMIT may reach Python before party 0's task resumes to note the commit.
    assert order[:2] == ["0 wrote", "0 passed, saw blocked [1]"]
    assert order[2:].index("1 wrote") < order[2:].index("1 passed, saw blocked []")
    assert sorted(order[2:]) == [
        "0 committed",
        "1 committed",
        "1 passed, saw blocked []",
        "1 wrote",
    ]
    assert rv.waited == {0: set(), 1: {"write"}}
    assert await db.fetchval("SELECT v FROM t") == 2


async def test_parties_wait_for_each_other_without_locks(db: asyncpg.Pool) -> None:
    """With no lock involved the rendezvous is a plain barrier: nobody passes before the last."""
    rv = Rendezvous(db, 3, ("read",), timeout=5)
    order: list[str] = []

    async def party(i: int) -> None:
        with rv.party(i, 1_000_000 + i):  # pids no backend has: never blocked
            await asyncio.sleep(0.02 * i)
            order.append(f"arrive {i}")
            await rv.arrive(i, "read")
            order.append(f"pass {i}")

    await asyncio.gather(*(party(i) for i in range(3)))
    assert order[:3] == ["arrive 0", "arrive 1", "arrive 2"]
    assert sorted(order[3:]) == ["pass 0", "pass 1", "pass 2"]


async def test_a_party_that_never_comes_is_a_loud_timeout(db: asyncpg.Pool) -> None:
    """A party neither arriving, leaving nor blocked fails the wait with InterleaveTimeout."""
    rv = Rendezvous(db, 2, ("read",), timeout=0.2)
    with rv.party(0, 1_000_000), pytest.raises(InterleaveTimeout, match=r"never joined"):
        await rv.arrive(0, "read")


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
