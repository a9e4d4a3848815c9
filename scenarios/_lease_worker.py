"""The code under test of lease-gc-pause: a Redis lease around a fenced storage write.

One implementation, run two ways: in the lab's own event loop (B, C, and A in
``pause_mode=sleep``), or as this module's ``__main__`` in a process of its own, with its
own Redis and PostgreSQL connections, so that the lab can freeze it for real (A in
``pause_mode=sigstop``). The process speaks JSON lines: it reads its config and then
``go`` on stdin, and writes one line per step on stdout. At its pause point it stops
itself with SIGSTOP, the way a stop-the-world GC halts every thread at a safepoint; the
lab decides how long it stays frozen and resumes it with SIGCONT (or kills it).

Two more holders speak the same protocol: ``redis_urls`` (several) makes it a Redlock
holder (`QuorumLease`, the scenario redlock), and ``stall: "cpu"`` makes the stall a
busy event loop instead of a stop: one large ``json.loads`` (lease-busy-loop), reported
as ``busy`` / ``idle`` rather than ``stall`` / ``resume``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lab.redislock import COMPARE_AND_DELETE, Redlock

if TYPE_CHECKING:
    import asyncpg
    import redis.asyncio as aioredis

INVOICE_ID = 42
RELEASES = {"del": "plain DEL", "cad": "compare-and-delete", "get-del": "GET-then-DEL"}
WRITE_PLAIN = "UPDATE invoices SET body = $2, fence = $1 WHERE id = 42"
WRITE_FENCED = "UPDATE invoices SET body = $2, fence = $1 WHERE id = 42 AND fence < $1"

Report = Callable[..., None]  # report(event, **fields): one line of the trace
Hook = Callable[[], Awaitable[None]]


async def noop() -> None:
    """A hook that does nothing (no stall, no work)."""
    return None


@dataclass
class Lease:
    """`SET key token NX PX ttl` + `INCR key:fence`, a write, and one of three releases."""

    redis: aioredis.Redis
    conn: asyncpg.Connection
    key: str
    fence_key: str
    ttl_ms: int
    token: str
    release_kind: str  # "del" | "cad" | "get-del"
    fenced: bool
    report: Report

    async def acquire(self) -> int | None:
        """The fence number when the lock was free, None when it was busy."""
        if not await self.redis.set(self.key, self.token, nx=True, px=self.ttl_ms):
            return None
        return int(await self.redis.incr(self.fence_key))

    async def write(self, fence: int, body: str) -> int:
        """Rows the storage write changed (the fenced write refuses an older fence)."""
        status = await self.conn.execute(WRITE_FENCED if self.fenced else WRITE_PLAIN, fence, body)
        return int(status.split()[-1])

    async def release(self, window: Hook = noop) -> int:
        """What the release command returned: 1 when it deleted the key, else 0.

        `window` runs where the release can be interleaved: between GET and DEL; the two
        one-command releases are atomic in Redis, so it can only run before them.
        """
        if self.release_kind == "del":
            await window()
            return int(await self.redis.delete(self.key))
        if self.release_kind == "cad":
            await window()
            return int(await self.redis.eval(COMPARE_AND_DELETE, 1, self.key, self.token))
        value = await self.redis.get(self.key)  # GET-then-DEL: the check runs in the client
        mine = value in (self.token, self.token.encode())
        self.report("GET", mine=mine)
        if not mine:
            return 0
        await window()
        return int(await self.redis.delete(self.key))


@dataclass
class QuorumLease:
    """A Redlock holder around the same write: the fence is issued by the storage
    (a PostgreSQL sequence), since Redlock's independent nodes have no counter to agree on."""

    lock: Redlock
    conn: asyncpg.Connection
    fenced: bool
    report: Report

    async def acquire(self) -> int | None:
        grant = await self.lock.acquire()
        self.report("quorum", votes=grant.votes, nodes=grant.nodes, won=grant.won,
                    elapsed_ms=round(grant.elapsed_ms, 2),
                    validity_ms=round(grant.validity_ms, 1))  # fmt: skip
        if not grant.won:
            return None
        return int(await self.conn.fetchval("SELECT nextval('invoice_fence')"))

    async def write(self, fence: int, body: str) -> int:
        status = await self.conn.execute(WRITE_FENCED if self.fenced else WRITE_PLAIN, fence, body)
        return int(status.split()[-1])

    async def release(self, window: Hook = noop) -> int:
        """How many nodes still held this holder's key and deleted it."""
        await window()
        return sum(await self.lock.release())


async def hold(
    lease: Lease | QuorumLease, who: str, *, pause_at: str | None, stall: Hook, work: Hook = noop
) -> str:
    """One worker: take the lease, write with its fence, work, release in `finally`.

    `pause_at` is where this worker stalls: "work" (after acquiring, before the write),
    "release" (inside the release: between GET and DEL, or before the one command), or None.
    """
    fence = await lease.acquire()
    if fence is None:
        lease.report("lock busy")
        return "lock_busy"
    lease.report("got lock", fence=fence)
    rows = 0
    try:
        if pause_at == "work":
            await stall()
        rows = await lease.write(fence, f"from {who}")
        lease.report("write", fence=fence, rows=rows)
        await work()
    finally:
        result = await lease.release(stall if pause_at == "release" else noop)
        how = RELEASES[lease.release_kind] if isinstance(lease, Lease) else RELEASES["cad"]
        lease.report("release", result=result, how=how)
    return "wrote" if rows else "write_rejected"


# --- the worker process --------------------------------------------------------------------


def _emit(event: str, **fields: Any) -> None:
    # Stamped here: perf_counter is the system-wide monotonic clock the lab's trace uses too.
    sys.stdout.write(json.dumps({"event": event, "t": time.perf_counter(), **fields}) + "\n")
    sys.stdout.flush()


async def _stop_self() -> None:
    """Freeze this whole process (every thread, the event loop, its timers) until SIGCONT."""
    before = time.monotonic()
    _emit("stall", pid=os.getpid())
    os.kill(os.getpid(), signal.SIGSTOP)
    _emit("resume", frozen_ms=round((time.monotonic() - before) * 1000, 1))


def busy_payload(rows: int) -> str:
    """A JSON array of `rows` small objects (built fast; parsing it is the CPU work)."""
    return "[" + ",".join([BUSY_ROW] * rows) + "]"


BUSY_ROW = '{"id": 1, "customer": "c-000001", "lines": [1, 2, 3], "amount": 1.5}'


def _busy_stall(payload: str) -> Hook:
    """The stall of a holder that is "still running": its own event loop parses JSON, so no
    other coroutine of it (a lease renewal, a timeout) runs until the parse ends."""

    async def stall() -> None:
        before = time.monotonic()
        _emit("busy", how="json.loads", chars=len(payload))
        json.loads(payload)
        _emit("idle", busy_ms=round((time.monotonic() - before) * 1000, 1))

    return stall


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when the lab (`parent`) dies, even while it is stopped;
    if it already has, exit now."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the lab died before prctl took effect: no signal will come
        os._exit(0)


async def _main() -> None:
    import asyncpg
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    cfg = json.loads(await asyncio.to_thread(sys.stdin.readline))
    # No silent retries: a lock client that retries hides what the server answered.
    urls = cfg.get("redis_urls") or [cfg["redis_url"]]
    nodes = [aioredis.Redis.from_url(u, retry=Retry(NoBackoff(), 0)) for u in urls]
    conn = await asyncpg.connect(cfg["dsn"])
    try:
        for node in nodes:
            await node.ping()
        lease: Lease | QuorumLease
        if "redis_urls" in cfg:
            lock = Redlock(nodes, cfg["key"], cfg["ttl_ms"], cfg["token"])
            lease = QuorumLease(lock, conn, cfg["fenced"], _emit)
        else:
            lease = Lease(
                nodes[0], conn, cfg["key"], cfg["fence_key"], cfg["ttl_ms"], cfg["token"],
                cfg["release"], cfg["fenced"], _emit,
            )  # fmt: skip
        stall: Hook = _stop_self
        if cfg.get("stall") == "cpu":
            stall = _busy_stall(busy_payload(int(cfg["busy_rows"])))  # built before "ready"
        _emit("ready", pid=os.getpid())
        if (await asyncio.to_thread(sys.stdin.readline)).strip() != "go":
            return
        outcome = await hold(lease, cfg["who"], pause_at=cfg["pause_at"], stall=stall)
        _emit("done", outcome=outcome)
    finally:
        await conn.close()
        for node in nodes:
            await node.aclose()


if __name__ == "__main__":
    _die_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid())  # the lab's PID
    asyncio.run(_main())
