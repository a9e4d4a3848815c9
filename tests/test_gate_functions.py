"""Plain Python functions as actors through the gate (lab.testing.explore_functions): no
step names, each function gets a DSN; async and sync ones alike; the first broken order
is the answer, and the fixed version keeps every order."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from lab.servers import Servers
from lab.testing import assert_kept, explore_functions

SETUP = "CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);\n"
SETUP += "INSERT INTO accounts VALUES (1, 100);"
BOTH_KEPT = "SELECT balance = 120 FROM accounts WHERE id = 1"


async def deposit(dsn: str) -> None:
    """Read, add 10 in Python, write back: the read-compute-write a user writes."""
    conn = await asyncpg.connect(dsn)
    try:
        balance = await conn.fetchval("SELECT balance FROM accounts WHERE id = 1")
        await conn.execute("UPDATE accounts SET balance = $1 WHERE id = 1", balance + 10)
    finally:
        await conn.close()


async def deposit_locked(dsn: str) -> None:
    """The same in a transaction whose read takes the row lock (FOR UPDATE)."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            query = "SELECT balance FROM accounts WHERE id = 1 FOR UPDATE"
            balance = await conn.fetchval(query)
            await conn.execute("UPDATE accounts SET balance = $1 WHERE id = 1", balance + 10)
    finally:
        await conn.close()


def deposit_sync(dsn: str) -> None:
    """A synchronous function (run in a thread), here on a loop of its own."""
    asyncio.run(deposit(dsn))


async def test_functions_lose_a_deposit_and_the_first_broken_order_says_so(
    servers: Servers,
) -> None:
    """Two deposits as functions: explore stops at the first order that loses one, and
    assert_kept fails with its transcript (statements and the values bound)."""
    assert servers.pg is not None
    found = await explore_functions(servers.pg.dsn, [deposit, deposit], SETUP, BOTH_KEPT)
    assert found.stopped.startswith("--first") and len(found.broke) == 1
    assert found.actors[0].command.endswith("test_gate_functions.deposit")
    with pytest.raises(AssertionError) as failed:
        assert_kept(found)
    text = str(failed.value)
    assert "invariant read False" in text
    assert "UPDATE accounts SET balance = $1 WHERE id = 1  -- ('110')" in text


async def test_a_sync_function_and_an_async_one_explore_together(servers: Servers) -> None:
    """A sync function beside an async one: every order runs, some lose the deposit."""
    assert servers.pg is not None
    found = await explore_functions(
        servers.pg.dsn, [deposit_sync, deposit], SETUP, BOTH_KEPT, first=False
    )
    assert found.complete and found.broke and len(found.broke) < len(found.orders)


async def test_the_locked_deposit_keeps_every_order(servers: Servers) -> None:
    """FOR UPDATE in a transaction: every order keeps both deposits."""
    assert servers.pg is not None
    found = await explore_functions(
        servers.pg.dsn, [deposit_locked, deposit_locked], SETUP, BOTH_KEPT, first=False
    )
    assert found.complete and len(found.orders) > 1
    assert_kept(found)


async def test_a_function_that_raises_breaks_its_order_naming_the_error(
    servers: Servers,
) -> None:
    """A function's own exception is its actor's exit 1, shown with the order."""
    assert servers.pg is not None

    async def fails(dsn: str) -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("SELECT * FROM no_such_table")
        finally:
            await conn.close()

    found = await explore_functions(servers.pg.dsn, [fails, deposit], SETUP)
    assert found.broke and found.broke[0].outcome().startswith("broke a1=1:42P01")
    with pytest.raises(AssertionError, match="UndefinedTableError"):
        assert_kept(found)
