"""Lease + GC pause: a Redis lock expires under a frozen holder; DEL and fencing decide the damage.

Symptom:    two workers send the same invoice: the lock "held", yet A and B (then B and C)
            both believed they owned it, and A's stale write overwrote B's.
Root cause: a lease expires while its holder is frozen (GC pause, VM suspend). Released by
            a plain DEL, the woken holder deletes the *next* holder's lock; written without
            a fence, its stale write lands. GET-then-DEL only narrows the window.
Fix:        a token per holder, a Lua compare-and-delete (fixed): C sees B's lock busy. The
            A/B overlap stays, so the storage refuses stale writers: a fence per lease.
Published:  TTL 300 ms, A pauses 500 ms, B at 350 ms, C at 550 ms: claims.py quotes the traces.
See:        claims.py (DL-10..13), worker.py (A), schedules.py + expected/, choreography.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import asyncpg
import redis.asyncio as aioredis

from lab.core.scenario import Env, executes
from lab.core.steps import Session
from lab.kit.redislock import COMPARE_AND_DELETE

INVOICE_ID = 42  # the published timings (ttl_ms, pause_ms, ...) are the params, claims.py
KEY = f"lock:invoice:{INVOICE_ID}"  # under the run's prefix: env.key(KEY)
RELEASES = {"del": "plain DEL", "cad": "compare-and-delete", "get-del": "GET-then-DEL"}
schema = executes("""CREATE TABLE invoices (id int PRIMARY KEY, body text NOT NULL,
  fence bigint NOT NULL)""")
WRITE_PLAIN = "UPDATE invoices SET body = $2, fence = $1 WHERE id = 42"
WRITE_FENCED = "UPDATE invoices SET body = $2, fence = $1 WHERE id = 42 AND fence < $1"

Report = Callable[..., None]  # report(event, **fields): one line of the trace
Hook = Callable[[], Awaitable[None]]


async def noop() -> None: ...  # a hook that does nothing (no stall, no work)


def _acquired(fence: int | None) -> str:
    """What the transcript shows of an acquire: the fence, or busy."""
    return f"OK, fence={fence}" if fence else "busy"


def _got(value: bytes | None) -> str:
    """What it shows of a GET: the token's first letter, or (nil)."""
    return f"<{value.decode()[:1]}>" if value else "(nil)"


class Held(Protocol):  # what `hold` needs of a lease: this one, or redlock's quorum
    def report(self, event: str, **fields: Any) -> None: ...
    async def acquire(self) -> int | None: ...
    async def write(self, fence: int, body: str) -> int: ...
    async def release(self, window: Hook = ...) -> int: ...


@dataclass
class Lease:
    """SET NX PX + INCR a fence, a write, a release: each a step of `s` (pinned: granted)."""

    redis: aioredis.Redis
    conn: asyncpg.Connection
    key: str
    fence_key: str
    ttl_ms: int
    token: str
    release_kind: str  # "del" (buggy) | "cad" (fixed) | "get-del" (buggy-get-then-del)
    fenced: bool
    report: Report
    s: Session | None = None

    def __post_init__(self) -> None:
        self.steps: Session = self.s or Session(self.token[:1], self.conn, 0)

    async def _take(self) -> int | None:
        if not await self.redis.set(self.key, self.token, nx=True, px=self.ttl_ms):
            return None
        return int(await self.redis.incr(self.fence_key))

    async def acquire(self) -> int | None:
        """The fence number when the lock was free, None when it was busy."""
        shown = f"SET {KEY} <{self.token[:1]}> NX PX {self.ttl_ms}; INCR {KEY}:fence"
        fence: int | None = await self.steps.step(
            "acquire", self._take, shown=shown, result=_acquired
        )
        return fence

    async def write(self, fence: int, body: str) -> int:
        """Rows the storage write changed (the fenced write refuses an older fence)."""
        sql = WRITE_FENCED if self.fenced else WRITE_PLAIN
        return int((await self.steps.execute("write", sql, fence, body)).split()[-1])

    async def release(self, window: Hook = noop) -> int:
        """1 when the release deleted the key, else 0; `window` runs where it can be
        interleaved: between GET and DEL (the one-command releases are atomic in Redis)."""
        step, delete = self.steps.step, partial(self.redis.delete, self.key)
        if self.release_kind != "get-del":
            await window()
            cad = partial(self.redis.eval, COMPARE_AND_DELETE, 1, self.key, self.token)
            plain = self.release_kind == "del"
            shown = f"DEL {KEY}" if plain else f"EVAL cad {KEY} <{self.token[:1]}>"
            return int(await step("release", delete if plain else cad, shown=shown))
        value = await step("get", self.redis.get, self.key, shown=f"GET {KEY}", result=_got)
        mine = value in (self.token, self.token.encode())
        self.report("GET", mine=mine)
        if not mine:  # GET-then-DEL: the check runs in the client
            return 0
        await window()
        return int(await step("del", delete, shown=f"DEL {KEY}"))


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
        lease.report("release", result=result, how=RELEASES[getattr(lease, "release_kind", "cad")])
    return "wrote" if rows else "write_rejected"


@dataclass(frozen=True)
class Code:  # what a variant runs: the release, whether the write is fenced, where A stalls
    release: str  # "del" | "cad" | "get-del"
    fenced: bool
    pause_at: str = "work"  # "work": before the write; "release": inside the release; "": never
    killed: bool = False  # a fault, not a fix: "A is killed" at its pause point, never wakes
    reaped: bool = False  # a mutant's supervisor: A's lock compare-and-deleted once A is dead

    async def __call__(self, env: Env, s: Session) -> str:  # pinned B or C (A: worker.py)
        key = env.key(KEY)
        who = s.name
        token = env.state["tokens"][s.name]
        trace = partial(env.trace, who)
        ttl = env.params["ttl_ms"]
        fkey = f"{key}:fence"
        lease = Lease(env.redis, s.conn, key, fkey, ttl, token, self.release, self.fenced, trace, s)
        return await hold(lease, who, pause_at=None, stall=noop)


VARIANTS = {
    "buggy": Code(release="del", fenced=False),
    "fixed": Code(release="cad", fenced=True),
    "buggy-get-then-del": Code(release="get-del", fenced=True, pause_at="release"),
    "holder-killed": Code(release="cad", fenced=True, killed=True),
}
# Code mutants (Scenario.mutants, counterfactuals only): fixed with A's pause dropped, the
# one thing the lease window (DL-11) rests on; holder-killed with a supervisor that frees a
# dead worker's lock at once, the one thing that would end a lease before its TTL (DL-13).
NO_PAUSE = "mutant-no-pause"
REAPED = "mutant-reaped"
MUTANTS = {
    NO_PAUSE: Code(release="cad", fenced=True, pause_at=""),
    REAPED: Code(release="cad", fenced=True, killed=True, reaped=True),
}


async def setup(env: Env) -> None:
    await env.db.execute(f"INSERT INTO invoices VALUES ({INVOICE_ID}, 'draft', 0)")
