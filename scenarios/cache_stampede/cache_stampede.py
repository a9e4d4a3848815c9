"""Cache stampede: 500 requests miss one key and poll a Redis lock every 50 ms.

Symptom:    a hot key expires and every request misses at once: one rebuild, but every loser
            polls Redis until it ends (~5.5x the fix's GETs at 500 requests, ~100k/s at 5,000).
Root cause: the document's code: GET; on a miss SET lock NX EX 10; the winner queries the DB,
            SETs the value, DELs the lock; a loser sleeps 50 ms and calls itself again. No
            bound, no token, no finally, no stale copy, no re-read of the cache after SET NX.
Fix:        singleflight, token + compare-and-delete in finally, a wait bounded at max_polls x
            poll_ms x U(1,2), then the stale copy or a fallback answer.
Published:  500 misses, 400 ms rebuild: poll GETs=2739, DB calls=1, 597 ms; singleflight
            GETs=500, DB calls=1, 531 ms; 5,000 waiters, 1 s rebuild: ~100k GET/s (Redis
            7.4.11, Node 24) — deadlock-distributed-lock-cron.vi.txt, "Cache rebuild lock".
See:        claims.py, wait_window.py, docs/load.md; waiters: lab/kit/waiters.py.
"""

from __future__ import annotations

import asyncio
import uuid

from lab.aio import within
from lab.core.scenario import Check, Env
from lab.kit.redislock import COMPARE_AND_DELETE
from lab.kit.waiters import Call, Command, Sleep, Waiter

KEY = "product:42"
LOCK = "lock:product:42"
STALE = "product:42:stale"
CACHE_TTL_S = 300
STALE_TTL_S = 86_400


class RebuildFailed(Exception):
    """The fake DB query threw."""


async def setup(env: Env) -> None:
    if env.params["stale"]:  # a stale copy left from before
        await env.redis.set(env.key(STALE), b"product-42-v0", ex=STALE_TTL_S)


def query_db(env: Env) -> Waiter[bytes]:
    """rebuild_ms of query, on the trace; with rebuild_fails a process's first one throws."""
    env.add("db_calls")
    fails = env.params["rebuild_fails"] and env.counters["db_calls"] == 1
    start = env.now_ms()
    try:
        yield Sleep(env.params["rebuild_ms"] / 1000)
    finally:
        env.trace("db", "rebuild", at_ms=start, end_ms=round(env.now_ms(), 1), failed=fails)
    if fails:
        raise RebuildFailed("the DB query failed")
    return b"product-42-v1"


def get(env: Env, key: str) -> Command:
    env.add("redis_get")
    return Command.get(env.key(key))


def take_lock(env: Env, actor: int, token: str) -> Waiter[bool]:
    env.add("redis_set")
    env.add("lock_attempts")
    ttl_ms = max(1, round(float(env.params["lock_ttl_s"]) * 1000))  # EX 10 is PX 10000
    taken = bool((yield Command.set(env.key(LOCK), token, nx=True, px=ttl_ms)))
    if taken:
        env.state["lock_owner"] = actor  # the lab's bookkeeping: buggy's lock has no token
    return taken


def write(env: Env, key: str, value: bytes, ttl_s: int) -> Waiter[None]:
    env.add("redis_set")
    yield Command.set(env.key(key), value, ex=ttl_s)
    env.trace("cache", "set", key=key)


async def buggy(env: Env, conn: object, actor: int) -> str:
    try:
        await env.do(get_polling(env, actor))
    except RebuildFailed:
        return "error"  # the request that ran the failing query answers 500
    return "ok"


def get_polling(env: Env, actor: int, depth: int = 0) -> Waiter[bytes]:
    value: bytes | None = yield get(env, KEY)
    if value is None:
        if not (yield Call(take_lock(env, actor, "1"))):
            env.add("polls")
            yield Sleep(env.params["poll_ms"] / 1000)  # the poll interval is the subject
            found: bytes = yield Call(get_polling(env, actor, depth + 1))  # unbounded
            return found
        value = yield Call(query_db(env))  # throws: no finally, the lock stays for its TTL
        yield Call(write(env, KEY, value, CACHE_TTL_S))
        env.add("redis_del")
        owner = env.state["lock_owner"]
        if (yield Command.delete(env.key(LOCK))) and owner != actor:  # no token: anyone's
            env.add("lock_deleted_foreign")
    env.sample("polls_per_request", depth)
    return value


async def fixed(env: Env, conn: object, actor: int) -> str:
    if await env.do(get(env, KEY)) is not None:
        return "ok"
    flights: dict[int, asyncio.Task[bytes]] = env.state.setdefault("flights", {})
    pod = actor % env.params["pods"]
    flight = flights.get(pod)  # a flight that ended well answers misses that raced its write
    if flight is None or (flight.done() and (flight.cancelled() or flight.exception())):
        flight = flights[pod] = asyncio.create_task(rebuild_once(env, actor))
    elif await stale(env, at_once=True):
        return "stale"  # the stale copy answers waiters at once
    budget = env.params["max_polls"] * env.params["poll_ms"] / 1000 * env.rng(actor).uniform(1, 2)
    try:
        await within(asyncio.shield(flight), budget)
    except TimeoutError:
        return "stale" if await stale(env) else "fallback"
    except RebuildFailed:
        return "stale" if await stale(env) else "error"
    return "ok"


async def rebuild_once(env: Env, actor: int) -> bytes:
    """One rebuild per process; across processes the Redis lock, with a token."""
    token = uuid.uuid4().hex
    if await env.do(take_lock(env, actor, token)):
        try:
            value: bytes = await env.do(query_db(env))
            await env.do(write(env, KEY, value, CACHE_TTL_S))
            await env.do(write(env, STALE, value, STALE_TTL_S))
            return value
        finally:
            env.add("redis_eval")
            release = Command.eval(COMPARE_AND_DELETE, 1, env.key(LOCK), token)
            env.add("lock_released" if await env.do(release) else "lock_expired_before_release")
    rng = env.rng(-1 - actor)
    for _ in range(env.params["max_polls"]):  # another process rebuilds: bounded wait
        await asyncio.sleep(env.params["poll_ms"] / 1000 * rng.uniform(1, 2))
        env.add("polls")
        if (found := await env.do(get(env, KEY))) is not None:
            return bytes(found)
    raise TimeoutError("another process holds the rebuild lock")


async def stale(env: Env, at_once: bool = False) -> bool:
    """With -p stale=true: is there a stale copy to answer with?"""
    if not env.params["stale"]:
        return False
    found = await env.do(get(env, STALE)) is not None
    if found:
        env.add("stale_at_once" if at_once else "stale_after_waiting")
    return found


async def invariant(env: Env) -> list[Check]:
    """The lock's purpose: one rebuild at a time (over every process's, wait_window.py)."""
    most = env.counters["max_concurrent_rebuilds"]
    return [Check("at most one rebuild at a time", most <= 1, f"{most} concurrent rebuilds")]
