"""`--connect tx-pool:<size>`: node-postgres' pool semantics, for actors written for asyncpg.

node-postgres (`new Pool()`, `db.tx`) checks a client out of a pool per transaction
*attempt* and returns it on COMMIT/ROLLBACK; a caller waiting for a client queues in
FIFO order, so a retry goes behind everyone already waiting. Here every actor gets a
`TxPoolConnection`: its `transaction()` takes a connection from a strictly FIFO pool on
entry and gives it back on exit; `execute`/`fetch*` outside a transaction take one for
that statement alone. Scenarios keep their asyncpg code unchanged.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import asyncpg

from lab.errors import ScenarioFailure


class FifoPool:
    """`size` open connections handed out strictly first come, first served.

    A released connection goes straight to the oldest waiter (no barging by a newcomer
    that asks between the release and the waiter's wake-up)."""

    def __init__(
        self,
        conns: list[asyncpg.Connection],
        reconnect: Callable[[], Awaitable[asyncpg.Connection]],
    ) -> None:
        self.conns = list(conns)  # every connection the pool owns, for closing
        self._free: collections.deque[asyncpg.Connection] = collections.deque(conns)
        self._waiters: collections.deque[asyncio.Future[asyncpg.Connection]] = collections.deque()
        self._reconnect = reconnect
        self._repairs: set[asyncio.Task[None]] = set()
        self.acquisitions = 0
        self.max_waiting = 0
        self.replaced = 0
        self.wait_ms: list[float] = []
        self.order: list[str] = []  # who got a connection, in order (tests read it)

    @property
    def waiting(self) -> int:
        return sum(1 for f in self._waiters if not f.done())

    async def acquire(self, who: str = "") -> asyncpg.Connection:
        began = time.perf_counter()
        if self._free and not self.waiting:
            conn = self._free.popleft()
        else:
            fut: asyncio.Future[asyncpg.Connection] = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            self.max_waiting = max(self.max_waiting, self.waiting)
            try:
                conn = await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self.release(fut.result())  # handed over just as we were cancelled
                raise
        self.acquisitions += 1
        self.wait_ms.append((time.perf_counter() - began) * 1000)
        self.order.append(who)
        return conn

    def release(self, conn: asyncpg.Connection) -> None:
        """Back to the oldest waiter, or to the free list. A connection left inside a
        transaction (its rollback was cancelled) or closed is replaced by a new one."""
        if conn.is_closed() or conn.is_in_transaction():
            conn.terminate()
            task = asyncio.get_running_loop().create_task(self._replace(conn))
            self._repairs.add(task)
            task.add_done_callback(self._repairs.discard)
            return
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return
        self._free.append(conn)

    async def _replace(self, old: asyncpg.Connection) -> None:
        new = await self._reconnect()
        self.conns[self.conns.index(old)] = new
        self.replaced += 1
        self.release(new)

    async def close(self) -> None:
        for t in list(self._repairs):
            t.cancel()
        await asyncio.gather(*self._repairs, return_exceptions=True)
        for c in self.conns:
            c.terminate()

    def stats(self) -> dict[str, Any]:
        s = sorted(self.wait_ms)
        return {
            "acquisitions": self.acquisitions,
            "max_waiting": self.max_waiting,
            "replaced_connections": self.replaced,
            "wait_ms_p50": round(s[len(s) // 2], 1) if s else None,
            "wait_ms_max": round(s[-1], 1) if s else None,
        }


class TxPoolConnection:
    """What an actor sees under tx-pool: asyncpg's connection surface, one pooled
    connection per transaction (or per statement outside one)."""

    def __init__(self, pool: FifoPool, who: str) -> None:
        self._pool = pool
        self._who = who
        self._held: asyncpg.Connection | None = None

    def transaction(self, **kwargs: Any) -> _PooledTransaction:
        return _PooledTransaction(self, kwargs)

    @asynccontextmanager
    async def _statement(self) -> AsyncIterator[asyncpg.Connection]:
        if self._held is not None:
            yield self._held
            return
        conn = await self._pool.acquire(self._who)
        try:
            yield conn
            if conn.is_in_transaction():  # a bare BEGIN: the next statement gets another client
                raise ScenarioFailure(
                    "under --connect tx-pool a transaction is `async with conn.transaction()`,"
                    " not a BEGIN statement"
                )
        finally:
            self._pool.release(conn)  # replaced, if it was left inside a transaction

    async def execute(self, query: str, *args: Any, **kwargs: Any) -> str:
        async with self._statement() as conn:
            result: str = await conn.execute(query, *args, **kwargs)
            return result

    async def executemany(self, command: str, args: Any, **kwargs: Any) -> None:
        async with self._statement() as conn:
            await conn.executemany(command, args, **kwargs)

    async def fetch(self, query: str, *args: Any, **kwargs: Any) -> list[Any]:
        async with self._statement() as conn:
            return list(await conn.fetch(query, *args, **kwargs))

    async def fetchrow(self, query: str, *args: Any, **kwargs: Any) -> Any:
        async with self._statement() as conn:
            return await conn.fetchrow(query, *args, **kwargs)

    async def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        async with self._statement() as conn:
            return await conn.fetchval(query, *args, **kwargs)

    def is_in_transaction(self) -> bool:
        return self._held is not None

    def is_closed(self) -> bool:
        """Whether the connection this transaction holds closed under it (outside a
        transaction the handle is never closed: each statement takes a live one)."""
        return self._held is not None and self._held.is_closed()


class _PooledTransaction:
    """`async with conn.transaction(...)`: acquire (FIFO), BEGIN, ..., COMMIT/ROLLBACK,
    release. Nested, it is asyncpg's savepoint on the held connection."""

    def __init__(self, owner: TxPoolConnection, kwargs: dict[str, Any]) -> None:
        self._owner = owner
        self._kwargs = kwargs
        self._conn: asyncpg.Connection | None = None
        self._tx: Any = None
        self._nested = False

    async def start(self) -> None:
        """Acquire a pooled connection (FIFO) and BEGIN on it; nested, a savepoint."""
        owner = self._owner
        if owner._held is not None:
            self._nested = True
            self._tx = owner._held.transaction(**self._kwargs)
            await self._tx.start()
            return
        conn = await owner._pool.acquire(owner._who)
        try:
            self._tx = conn.transaction(**self._kwargs)
            await self._tx.start()
        except BaseException:
            owner._pool.release(conn)
            raise
        self._conn = owner._held = conn

    async def commit(self) -> None:
        """COMMIT, then the connection goes back to the pool (replaced if left inside)."""
        try:
            await self._tx.commit()
        finally:
            self._release()

    async def rollback(self) -> None:
        """ROLLBACK, then the connection goes back to the pool (replaced if left inside)."""
        try:
            await self._tx.rollback()
        finally:
            self._release()

    def _release(self) -> None:
        if not self._nested and self._conn is not None:
            conn, self._conn = self._conn, None
            self._owner._held = None
            self._owner._pool.release(conn)

    async def __aenter__(self) -> _PooledTransaction:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.commit()
        else:
            await self.rollback()
