"""Redis failover: a replica that never saw the lock is promoted, and the lock is gone.

Symptom:    after a Redis failover two workers hold lock:invoice:42 at once, and the
            fencing token meant to stop the stale one repeats instead of increasing.
Root cause: replication is asynchronous. A's `SET ... NX PX` and its `INCR` of the fence
            reached the primary only; the primary died, the replica was promoted without
            them, so B takes the "free" lock and INCR hands B the same fence A already used.
            The storage cannot tell the rightful holder's write from the stale one.
Fix:        fixed: the fence comes from the storage itself (a counter row in PostgreSQL,
            durable and ordered), so B's fence is always above A's; fixed-wait: after the
            SET, `WAIT 1 <ms>` asks a replica to acknowledge it, and a lock no replica
            holds is treated as not acquired.
Published:  "Redis failover: replica chưa nhận lệnh SET lock được promote; người khác lấy
            được lock ngay. Fencing token (INCR) cũng có thể bị lùi nếu INCR chưa
            replicate: fencing tốt nhất là số do storage sinh hoặc xác nhận"
            — deadlock-distributed-lock-cron.vi.txt (edge cases)
See:        DL-14 in claims.py. The run owns a primary, its replica and three Sentinels
            (lab/servers/redissentinel.py): the replication link is partitioned (the lab's proxy
            drops what passes, both ends stay connected) before A locks, the primary is
            killed with SIGKILL, and the Sentinels notice, agree, elect a leader and
            promote the replica; clients find the primary by asking them. The lab sends no
            REPLICAOF and no SENTINEL FAILOVER (why not SIGSTOP: claims.py).
"""

from __future__ import annotations

import secrets
from typing import Any

import redis.asyncio as aioredis

from lab.core.scenario import Check, Env
from lab.kit.redislock import COMPARE_AND_DELETE
from lab.servers.redissentinel import NAME, Events
from scenarios.lease_gc_pause.lease_gc_pause import WRITE_FENCED

LOCK = "lock:invoice:42"
FENCE = "lock:invoice:42:fence"
FENCES_BEFORE = 5  # earlier holders, replicated before the incident
LEASE_MS = 10_000  # A believes it holds the lock this long
WAIT_MS = 200  # fixed-wait: how long to wait for a replica's acknowledgement
SYNC_S = 5.0  # the replica links and catches up well within this
FAILOVER_S = 20.0  # the Sentinels promote within ~2 s (down-after 300 ms, one election)


async def setup(env: Env) -> None:
    await env.db.execute(f"""
        CREATE TABLE invoices (id int PRIMARY KEY, body text, fence bigint NOT NULL);
        INSERT INTO invoices VALUES (42, 'empty', 0);
        CREATE TABLE fences (name text PRIMARY KEY, value bigint NOT NULL);
        INSERT INTO fences VALUES ('{LOCK}', {FENCES_BEFORE})""")


async def _fence(env: Env, r: aioredis.Redis, from_storage: bool) -> int:
    if from_storage:
        value = await env.db.fetchval(
            "UPDATE fences SET value = value + 1 WHERE name = $1 RETURNING value", LOCK
        )
        return int(value)
    return int(await r.incr(FENCE))


async def _write(env: Env, who: str, fence: int) -> int:
    status = await env.db.execute(WRITE_FENCED, fence, f"from {who}")
    rows = int(status.split()[-1])
    env.trace(who, "write", fence=fence, rows=rows)
    return rows


async def _run(env: Env, *, storage_fence: bool, wait_for_replica: bool) -> None:
    group = await env.redis_sentinel()
    events = await Events(group).start()
    sentinel = group.sentinel(decode_responses=True, retry_on_timeout=False)
    a = sentinel.master_for(NAME)  # the service's client: asks the Sentinels for the primary
    holders: list[dict[str, Any]] = []
    clients = [a]
    try:
        await a.set(FENCE, FENCES_BEFORE)
        await group.until_synced(SYNC_S)
        env.trace("observer", "replica in sync", fence=FENCES_BEFORE)

        await group.partition()  # both keep the link open; what the primary accepts is lost
        env.trace("observer", "replication link partitioned")
        token_a = secrets.token_hex(8)
        got = await a.set(LOCK, token_a, nx=True, px=LEASE_MS)
        env.trace("A", "SET NX PX on the primary", ok=bool(got))
        acked = 1
        if wait_for_replica:
            acked = int(await a.wait(1, WAIT_MS))
            env.trace("A", "WAIT 1", replicas_acked=acked)
            if acked == 0:
                await a.eval(COMPARE_AND_DELETE, 1, LOCK, token_a)
                env.trace("A", "lock not replicated: released, not proceeding")
        fence_a = None
        if acked > 0:  # A proceeds
            fence_a = await _fence(env, a, storage_fence)
            holders.append({"who": "A", "fence": fence_a, "granted": bool(got)})
            env.trace("A", "got lock", fence=fence_a)
            await _write(env, "A", fence_a)

        events.mark()  # the Sentinels' events are timed from the primary's death
        group.kill_primary()
        env.trace("observer", "primary killed (SIGKILL); the Sentinels decide what follows")
        new_primary = await events.promoted(FAILOVER_S)
        env.trace("observer", "Sentinels switched the primary", to=new_primary)
        b = sentinel.master_for(NAME)
        clients.append(b)
        lock = await b.get(LOCK)
        got_b = await b.set(LOCK, secrets.token_hex(8), nx=True, px=LEASE_MS)
        env.trace("B", "SET NX PX on the new primary", ok=bool(got_b), lock_found=lock)
        fence_b = await _fence(env, b, storage_fence)
        holders.append({"who": "B", "fence": fence_b, "granted": bool(got_b)})
        env.trace("B", "got lock", fence=fence_b)
        env.outcome("wrote" if await _write(env, "B", fence_b) else "write_rejected")

        if fence_a is None:
            env.outcome("lock_not_replicated")
        else:  # A wakes from its pause, still inside its lease, and writes again
            rows = await _write(env, "A", fence_a)
            env.outcome("stale_write_landed" if rows else "stale_write_rejected")
        failover = group.failover(events, new_primary, lock_on_new_primary=lock)
        env.extra_evidence.update(
            {"holders": holders, "fence_a": fence_a, "fence_b": fence_b, "failover": failover}
        )
    finally:
        await events.stop()
        for client in clients:
            await client.aclose()


async def buggy(env: Env) -> None:
    await _run(env, storage_fence=False, wait_for_replica=False)


async def fixed(env: Env) -> None:
    await _run(env, storage_fence=True, wait_for_replica=False)


async def fixed_wait(env: Env) -> None:
    await _run(env, storage_fence=False, wait_for_replica=True)


async def invariant(env: Env) -> list[Check]:
    """The invoice holds the write of the worker that holds the lock now (B)."""
    body = await env.db.fetchval("SELECT body FROM invoices WHERE id = 42")
    return [
        Check("invoice written by the current holder", body == "from B", f"invoice body: {body!r}")
    ]
