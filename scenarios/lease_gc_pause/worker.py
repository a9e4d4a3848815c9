"""A holder in a process of its own, on the harness's worker protocol (lab.procs.workers).

The same `hold` as in lease_gc_pause.py, with this process's own Redis and PostgreSQL
connections, so the lab can freeze it whole: at its pause point it waits for the step
``wake``, and while it waits the lab stops it (SIGSTOP, the way a stop-the-world GC halts
every thread at a safepoint), then grants ``wake`` and resumes it (SIGCONT), or kills it.
Its config: who, redis_url, dsn, key, fence_key, ttl_ms, token, release, fenced, pause_at.
With ``pinned`` (lab/pinned/stage.py) each command of the lease is a step the lab grants (no
``go``, no ``wake``): the schedule pauses, wakes or kills this process between two steps.

Two more holders run here for other scenarios: ``redis_urls`` (several) makes it a Redlock
holder (`QuorumLease`, redlock), and ``stall: "cpu"`` makes the stall a busy event loop
instead of a stop: one large ``json.loads`` (lease-busy-loop), reported as ``busy`` /
``idle``. Run as a script (its folder is ``sys.path[0]``), it imports no scenario package:
the catalogue stays out of the worker.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import asyncpg

from lab.core.steps import Session
from lab.kit.redislock import Redlock
from lab.procs.workers import Child, run_child

if __package__:  # imported by the lab (redlock and lease-busy-loop import QuorumLease)
    from scenarios.lease_gc_pause.lease_gc_pause import (
        WRITE_FENCED,
        WRITE_PLAIN,
        Hook,
        Lease,
        Report,
        hold,
        noop,
    )
else:  # the worker process
    from lease_gc_pause import (  # type: ignore[import-not-found,no-redef]
        WRITE_FENCED,
        WRITE_PLAIN,
        Hook,
        Lease,
        Report,
        hold,
        noop,
    )

BUSY_ROW = '{"id": 1, "customer": "c-000001", "lines": [1, 2, 3], "amount": 1.5}'
__all__ = ["BUSY_ROW", "QuorumLease", "busy_payload", "noop"]


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
        self.report(
            "quorum",
            votes=grant.votes,
            nodes=grant.nodes,
            won=grant.won,
            elapsed_ms=round(grant.elapsed_ms, 2),
            validity_ms=round(grant.validity_ms, 1),
        )
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


def busy_payload(rows: int) -> str:
    """A JSON array of `rows` small objects (built fast; parsing it is the CPU work)."""
    return "[" + ",".join([BUSY_ROW] * rows) + "]"


def frozen_by_the_lab(child: Child) -> Hook:
    """The pause step: wait for ``wake``; the lab stops this process meanwhile."""

    async def stall() -> None:
        before = time.monotonic()
        await child.step("wake")
        child.emit("resume", frozen_ms=round((time.monotonic() - before) * 1000, 1))

    return stall


def busy(child: Child, payload: str) -> Hook:
    """The stall of a holder that is "still running": its own event loop parses JSON, so no
    other coroutine of it (a lease renewal, a timeout) runs until the parse ends."""

    async def stall() -> None:
        before = time.monotonic()
        child.emit("busy", how="json.loads", chars=len(payload))
        json.loads(payload)
        child.emit("idle", busy_ms=round((time.monotonic() - before) * 1000, 1))

    return stall


async def main(child: Child) -> str:
    """Connect, report ``ready`` (by run_child), wait for ``go``, hold the lease once."""
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    cfg = child.config
    # No silent retries: a lock client that retries hides what the server answered.
    urls = cfg.get("redis_urls") or [cfg["redis_url"]]
    nodes = [aioredis.Redis.from_url(u, retry=Retry(NoBackoff(), 0)) for u in urls]
    conn = await asyncpg.connect(cfg["dsn"])
    try:
        for node in nodes:
            await node.ping()
        lease: Lease | QuorumLease
        steps: Session | None = None
        if pinned := bool(cfg.get("pinned")):  # a load's worker does without the stage's imports
            from lab.pinned.stage import ChildGate

            steps = Session(cfg["who"], conn, 0, gate=ChildGate(child))
        if "redis_urls" in cfg:
            lock = Redlock(nodes, cfg["key"], cfg["ttl_ms"], cfg["token"])
            lease = QuorumLease(lock, conn, cfg["fenced"], child.emit)
        else:
            lease = Lease(
                nodes[0],
                conn,
                cfg["key"],
                cfg["fence_key"],
                cfg["ttl_ms"],
                cfg["token"],
                cfg["release"],
                cfg["fenced"],
                child.emit,
                steps,
            )
        stall = noop if pinned else frozen_by_the_lab(child)
        if cfg.get("stall") == "cpu":
            stall = busy(child, busy_payload(int(cfg["busy_rows"])))  # built before "go"
        if not pinned:
            await child.step("go")
        return await hold(lease, cfg["who"], pause_at=cfg["pause_at"], stall=stall)
    finally:
        await conn.close()
        for node in nodes:
            await node.aclose()


if __name__ == "__main__":
    run_child(main)
