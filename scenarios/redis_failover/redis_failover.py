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
See:        DL-14 in claims.py. The run owns a disposable primary + replica: the replica is
            cut off (pointed at an address nobody listens on) before A locks, the primary is
            killed with SIGKILL, the replica promoted with REPLICAOF NO ONE. Nothing is left
            to luck (why not SIGSTOP: claims.py).
"""

from __future__ import annotations

import secrets
from typing import Any

import redis.asyncio as aioredis

from lab.aio import until
from lab.redislock import COMPARE_AND_DELETE
from lab.scenario import Check, Env
from scenarios.lease_gc_pause.lease_gc_pause import WRITE_FENCED

LOCK = "lock:invoice:42"
FENCE = "lock:invoice:42:fence"
FENCES_BEFORE = 5  # earlier holders, replicated before the incident
LEASE_MS = 10_000  # A believes it holds the lock this long
WAIT_MS = 200  # fixed-wait: how long to wait for a replica's acknowledgement
UNREACHABLE_PORT = 1  # privileged, nothing listens: the replica's link stays down
SYNC_S = 5.0  # the replica links and catches up well within this


async def setup(env: Env) -> None:
    await env.db.execute(f"""
        CREATE TABLE invoices (id int PRIMARY KEY, body text, fence bigint NOT NULL);
        INSERT INTO invoices VALUES (42, 'empty', 0);
        CREATE TABLE fences (name text PRIMARY KEY, value bigint NOT NULL);
        INSERT INTO fences VALUES ('{LOCK}', {FENCES_BEFORE})""")


def _client(url: str) -> aioredis.Redis:
    return aioredis.Redis.from_url(url, decode_responses=True, retry_on_timeout=False)


async def _synced(primary: aioredis.Redis, replica: aioredis.Redis) -> bool:
    """Whether the replica is linked and has everything the primary has."""
    info = await replica.info("replication")
    offset = (await primary.info("replication")).get("master_repl_offset")
    return info.get("master_link_status") == "up" and info.get("slave_repl_offset") == offset


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
    pair = await env.redis_pair()
    primary, replica = _client(pair.url("primary")), _client(pair.url("replica"))
    holders: list[dict[str, Any]] = []
    try:
        await primary.set(FENCE, FENCES_BEFORE)
        await until(lambda: _synced(primary, replica), SYNC_S, "the replica to catch up")
        env.trace("observer", "replica in sync", fence=FENCES_BEFORE)

        # Partition: the replica keeps its data; what the primary accepts now never reaches it
        await replica.replicaof("127.0.0.1", UNREACHABLE_PORT)
        env.trace("observer", "replica partitioned from the primary")
        token_a = secrets.token_hex(8)
        got = await primary.set(LOCK, token_a, nx=True, px=LEASE_MS)
        env.trace("A", "SET NX PX on the primary", ok=bool(got))
        if wait_for_replica:
            acked = int(await primary.wait(1, WAIT_MS))
            env.trace("A", "WAIT 1", replicas_acked=acked)
            if acked == 0:
                await primary.eval(COMPARE_AND_DELETE, 1, LOCK, token_a)
                env.trace("A", "lock not replicated: released, not proceeding")
        fence_a = None
        if not wait_for_replica or acked > 0:  # A proceeds
            fence_a = await _fence(env, primary, storage_fence)
            holders.append(
                {"who": "A", "server": "primary", "fence": fence_a, "granted": bool(got)}
            )
            env.trace("A", "got lock", fence=fence_a)
            await _write(env, "A", fence_a)

        pair.kill_primary()
        await replica.replicaof("NO", "ONE")
        lock = await replica.get(LOCK)
        env.trace("observer", "primary killed, replica promoted", lock_on_new_primary=lock)
        token_b = secrets.token_hex(8)
        got_b = await replica.set(LOCK, token_b, nx=True, px=LEASE_MS)
        env.trace("B", "SET NX PX on the promoted replica", ok=bool(got_b))
        fence_b = await _fence(env, replica, storage_fence)
        holders.append({"who": "B", "server": "promoted replica", "fence": fence_b,
                        "granted": bool(got_b)})  # fmt: skip
        env.trace("B", "got lock", fence=fence_b)
        env.outcome("wrote" if await _write(env, "B", fence_b) else "write_rejected")

        if fence_a is None:
            env.outcome("lock_not_replicated")
        else:  # A wakes from its pause, still inside its lease, and writes again
            rows = await _write(env, "A", fence_a)
            env.outcome("stale_write_landed" if rows else "stale_write_rejected")
        env.extra_evidence.update({"holders": holders, "fence_a": fence_a, "fence_b": fence_b})
    finally:
        for client in (primary, replica):
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
