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
Written:    both variants in one language, async functions that await Redis through
            awaits.py (`await redis(...)`, `await sleep(...)`, `await call(...)`): the
            waiter engine runs them fast enough for 5,000 pollers (docs/load.md).
See:        claims.py, wait_window.py, docs/load.md; awaits.py, lab/kit/waiters.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from lab.aio import within
from lab.core.scenario import Check, Env
from lab.kit.redislock import COMPARE_AND_DELETE
from lab.kit.waiters import Command
from scenarios.cache_stampede.awaits import call, redis, run, sleep

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


async def query_db(env: Env) -> bytes:
    """rebuild_ms of query, on the trace; with rebuild_fails a process's first one throws."""
    env.add("db_calls")
    fails = env.params["rebuild_fails"] and env.counters["db_calls"] == 1
    start = env.now_ms()
    try:
        await sleep(env.params["rebuild_ms"] / 1000)
    finally:
        env.trace("db", "rebuild", at_ms=start, end_ms=round(env.now_ms(), 1), failed=fails)
    if fails:
        raise RebuildFailed("the DB query failed")
    return b"product-42-v1"


async def get(env: Env, key: str) -> bytes | None:
    env.add("redis_get")
    value: bytes | None = await redis(Command.get(env.key(key)))
    return value


async def take_lock(env: Env, actor: int, token: str, nx: bool = True) -> bool:
    env.add("redis_set")
    env.add("lock_attempts")
    ttl_ms = max(1, round(float(env.params["lock_ttl_s"]) * 1000))  # EX 10 is PX 10000
    taken = bool(await redis(Command.set(env.key(LOCK), token, nx=nx, px=ttl_ms)))
    if taken:
        env.state["lock_owner"] = actor  # the lab's bookkeeping: buggy's lock has no token
    return taken


async def write(env: Env, key: str, value: bytes, ttl_s: int) -> None:
    env.add("redis_set")
    await redis(Command.set(env.key(key), value, ex=ttl_s))
    env.trace("cache", "set", key=key)


# --- buggy: the document's code -------------------------------------------------------


Lock = Callable[[Env, int, str], Awaitable[bool]]  # SET lock NX: did this caller take it?
Rebuild = Callable[[Env, int], Awaitable[bytes]]  # what the lock's taker does


async def rebuild_and_delete(env: Env, actor: int) -> bytes:
    """The lock's taker: query, write the cache, DEL the lock."""
    value = await query_db(env)  # throws: no finally, the lock stays for its TTL
    await write(env, KEY, value, CACHE_TTL_S)
    await delete_lock(env, actor)
    return value


async def buggy(
    env: Env,
    conn: object,
    actor: int,
    lock: Lock = take_lock,
    rebuild: Rebuild = rebuild_and_delete,
) -> str:
    """The document's request; `lock` and `rebuild` are replaced only by the code mutants."""
    try:
        await run(env, get_polling(env, actor, 0, lock, rebuild))
    except RebuildFailed:
        return "error"  # the request that ran the failing query answers 500
    return "ok"


async def get_polling(env: Env, actor: int, depth: int, lock: Lock, rebuild: Rebuild) -> bytes:
    value = await get(env, KEY)
    if value is None:
        if not await lock(env, actor, "1"):
            env.add("polls")
            await sleep(env.params["poll_ms"] / 1000)  # the poll interval is the subject
            # unbounded recursion
            return await call(get_polling(env, actor, depth + 1, lock, rebuild))
        value = await rebuild(env, actor)
    env.sample("polls_per_request", depth)
    return value


async def delete_lock(env: Env, actor: int) -> None:
    """DEL with no token: it deletes whoever's lock is there now."""
    env.add("redis_del")
    owner = env.state["lock_owner"]
    deleted = await redis(Command.delete(env.key(LOCK)))
    if deleted and owner != actor:
        env.add("lock_deleted_foreign")


# --- fixed: singleflight, token + compare-and-delete in finally, bounded wait, stale copy


async def fixed(env: Env, conn: object, actor: int) -> str:
    if await run(env, get(env, KEY)) is not None:
        return "ok"
    flights: dict[int, asyncio.Future[bytes]] = env.state.setdefault("flights", {})
    pod = actor % env.params["pods"]
    flight = flights.get(pod)  # a flight that ended well answers misses that raced its write
    if flight is None or (flight.done() and (flight.cancelled() or flight.exception())):
        flight = asyncio.ensure_future(run(env, rebuild_once(env, actor)))
        flights[pod] = flight
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
    if await take_lock(env, actor, token):
        try:
            value = await query_db(env)
            await write(env, KEY, value, CACHE_TTL_S)
            await write(env, STALE, value, STALE_TTL_S)
            return value
        finally:
            await release_lock(env, token)
    rng = env.rng(-1 - actor)
    for _ in range(env.params["max_polls"]):  # another process rebuilds: bounded wait
        await sleep(env.params["poll_ms"] / 1000 * rng.uniform(1, 2))
        env.add("polls")
        found = await get(env, KEY)
        if found is not None:
            return found
    raise TimeoutError("another process holds the rebuild lock")


async def release_lock(env: Env, token: str) -> None:
    """Compare-and-delete: only the lock this token took (it may have expired since)."""
    env.add("redis_eval")
    released = await redis(Command.eval(COMPARE_AND_DELETE, 1, env.key(LOCK), token))
    env.add("lock_released" if released else "lock_expired_before_release")


async def stale(env: Env, at_once: bool = False) -> bool:
    """With -p stale=true: is there a stale copy to answer with?"""
    if not env.params["stale"]:
        return False
    found = await run(env, get(env, STALE)) is not None
    if found:
        env.add("stale_at_once" if at_once else "stale_after_waiting")
    return found


# --- code mutants: buggy with one guard dropped, run only as counterfactuals (DL-19) -----
NO_NX = "mutant-lock-without-nx"  # the lock's SET without NX: every caller takes it
UNCOUNTED = "mutant-uncounted-reread"  # a GET sent past the client's counter


async def lock_without_nx(env: Env, actor: int, token: str) -> bool:
    """SET lock without NX: it overwrites whoever's lock is there and always answers OK."""
    return await take_lock(env, actor, token, nx=False)


async def reread_uncounted(env: Env, actor: int) -> bytes:
    """The re-read of the cache after SET NX that the document lacks, written as a plain
    client call: Redis runs and counts the GET, the request's counter (get()) never sees it."""
    found: bytes | None = await redis(Command.get(env.key(KEY)))
    if found is not None:  # filled since this request's miss: no rebuild
        await delete_lock(env, actor)
        return found
    return await rebuild_and_delete(env, actor)


async def without_nx(env: Env, conn: object, actor: int) -> str:
    """Not a variant: buggy whose lock is taken by every caller (more than one rebuild)."""
    return await buggy(env, conn, actor, lock=lock_without_nx)


async def uncounted_reread(env: Env, conn: object, actor: int) -> str:
    """Not a variant: buggy whose lock taker re-reads the cache with a GET it never counts."""
    return await buggy(env, conn, actor, rebuild=reread_uncounted)


# plain functions, not partials: a sharded run finds its code by the function's module
MUTANTS = {NO_NX: without_nx, UNCOUNTED: uncounted_reread}


async def invariant(env: Env) -> list[Check]:
    """The lock's purpose: one rebuild at a time (over every process's, wait_window.py)."""
    most = env.counters["max_concurrent_rebuilds"]
    return [Check("at most one rebuild at a time", most <= 1, f"{most} concurrent rebuilds")]
