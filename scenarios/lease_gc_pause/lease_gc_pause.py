"""Lease + GC pause: a Redis lock expires under a frozen holder; DEL and fencing decide the damage.

Symptom:    two workers send the same invoice: the lock "held", yet A and B (and then B
            and C) both believed they owned it, and A's stale write overwrote B's.
Root cause: a lease expires while its holder is frozen (GC pause, VM suspend) and the
            holder cannot know. Released with a plain DEL, the woken holder deletes the
            *next* holder's lock and lets a third in; written without a fence, its stale
            write lands. GET-then-DEL from the client only narrows the window: the lock
            can expire and be taken between the two commands.
Fix:        a random token per holder and a Lua compare-and-delete in `finally` (fixed):
            keeps B's lock, C sees it busy. Every lease still has the A/B overlap, so the
            storage must refuse stale writers: INCR a fence with each lease and write
            `UPDATE invoices SET body=$2, fence=$1 WHERE id=42 AND fence < $1`.
Published:  TTL 300 ms, A pauses 500 ms, B at 350 ms, C at 550 ms. Plain DEL: A release
            -> 1 (deletes B's lock), C got lock fence=3 while B holds. Compare-and-delete:
            C lock busy, A release -> 0, B release -> 0. Fencing: B (fence=2) writes -> 1,
            A (fence=1) writes -> 0, row {id: 42, body: 'from B', fence: 2} (Redis 7.4.11,
            Node 24) — deadlock-distributed-lock-cron.vi.txt, "Redis lock: DEL trơn ...".
See:        claims DL-10..DL-13 and the fence invariant in claims.py; worker.py (A's
            process, frozen at its pause point); choreography.py (runs SCHEDULE, observes
            the key, draws the timeline).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg
import redis.asyncio as aioredis

from lab.redislock import COMPARE_AND_DELETE
from lab.scenario import Env

INVOICE_ID = 42  # the published timings (ttl_ms, pause_ms, ...) are the params, claims.py
RELEASES = {"del": "plain DEL", "cad": "compare-and-delete", "get-del": "GET-then-DEL"}
WRITE_PLAIN = "UPDATE invoices SET body = $2, fence = $1 WHERE id = 42"
WRITE_FENCED = "UPDATE invoices SET body = $2, fence = $1 WHERE id = 42 AND fence < $1"

Report = Callable[..., None]  # report(event, **fields): one line of the trace
Hook = Callable[[], Awaitable[None]]


async def noop() -> None:  # a hook that does nothing (no stall, no work)
    return None


class Held(Protocol):  # what `hold` needs of a lease: this one, or redlock's quorum
    def report(self, event: str, **fields: Any) -> None: ...

    async def acquire(self) -> int | None: ...
    async def write(self, fence: int, body: str) -> int: ...
    async def release(self, window: Hook = ...) -> int: ...


@dataclass
class Lease:
    """`SET key token NX PX ttl` + `INCR key:fence`, a write, and one of three releases."""

    redis: aioredis.Redis
    conn: asyncpg.Connection
    key: str
    fence_key: str
    ttl_ms: int
    token: str
    release_kind: str  # "del" (buggy) | "cad" (fixed) | "get-del" (buggy-get-then-del)
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
        """1 when the release deleted the key, else 0; `window` runs where it can be
        interleaved: between GET and DEL (the one-command releases are atomic in Redis)."""
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


async def hold(
    lease: Held, who: str, *, pause_at: str | None, stall: Hook, work: Hook = noop
) -> str:
    """One worker: take the lease, write with its fence, work, release in `finally`;
    it stalls (the pause step) at `pause_at`: "work" (before the write), "release", None."""
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
        how = RELEASES[getattr(lease, "release_kind", "cad")]
        lease.report("release", result=result, how=how)
    return "wrote" if rows else "write_rejected"


@dataclass(frozen=True)
class Code:  # what a variant runs: the release, whether the write is fenced, where A stalls
    release: str  # "del" | "cad" | "get-del"
    fenced: bool
    pause_at: str = "work"  # "work": before the write; "release": inside the release
    killed: bool = False  # a fault, not a fix: "A is killed" at its pause point, never wakes


VARIANTS = {
    "buggy": Code(release="del", fenced=False),
    "fixed": Code(release="cad", fenced=True),
    "buggy-get-then-del": Code(release="get-del", fenced=True, pause_at="release"),
    "holder-killed": Code(release="cad", fenced=True, killed=True),
}
# (when, step): each step at its time and after the step before it has ended. A's pause is
# a fault step: A stops at its pause point (SIGSTOP) until "A wakes" (SIGCONT), or is killed.
SCHEDULE = (
    ("0", "A takes the lease and stalls"),
    ("0", "A is killed"),  # only in holder-killed: SIGKILL while stopped, no finally runs
    ("b_at_ms", "B tries"),  # not before Redis reports A's lease gone, when b_at_ms >= ttl_ms
    ("c_at_ms", "C tries"),
    ("pause_ms", "A wakes"),  # not in holder-killed
)


async def setup(env: Env) -> None:
    await env.db.execute(f"""
        CREATE TABLE invoices (id int PRIMARY KEY, body text NOT NULL, fence bigint NOT NULL);
        INSERT INTO invoices VALUES ({INVOICE_ID}, 'draft', 0);""")  # fmt: skip
