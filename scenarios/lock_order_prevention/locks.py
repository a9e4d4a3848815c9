"""The Redis lock every variant takes, and what the lab sees of it.

The document's tryAcquireLock / acquireWithTimeout / releaseLock: ``SET lock:<resource>
<token> NX PX lock_ttl_ms``, polled every poll_ms while busy, released by a Lua
compare-and-delete. Each take, wait and release is told to the run state (detector.py),
from which the detector draws its wait-for graph.
"""

from __future__ import annotations

import asyncio

from lab.aio import until, within
from lab.core.scenario import Env
from lab.core.steps import Session
from lab.kit.redislock import COMPARE_AND_DELETE
from scenarios.lock_order_prevention.checkers import LockHierarchy, level_of
from scenarios.lock_order_prevention.detector import name, state


class LockTimeout(Exception):
    """acquireWithTimeout returned null: the caller fails the transfer."""


class Frozen(TimeoutError):
    """Still waiting after watch_ms: the lab stops the worker (outcome `timeout`); like a
    killed process it releases nothing."""


def new_token(env: Env, s: Session) -> str:
    """The holder's token: unique per lock asked for, the same on every run of a schedule."""
    st = state(env)
    st.tokens[s.index] += 1
    return f"{s.name}-{st.tokens[s.index]}"


async def try_lock(env: Env, s: Session, resource: str, token: str) -> bool:
    """tryAcquireLock: one SET lock:<resource> <token> NX PX lock_ttl_ms."""
    env.add("set_nx")
    ttl = int(env.params["lock_ttl_ms"])
    taken = bool(await env.redis.set(env.key(f"lock:{resource}"), token, nx=True, px=ttl))
    if (task := asyncio.current_task()) is not None and task.cancelling():
        raise asyncio.CancelledError  # redis-py 8.1 can return from a command it was cancelled in
    if taken:
        state(env).holders[resource] = (s.index, token)
        env.trace(name(s.index), "holds", resource=resource)
    return taken


async def acquire(
    env: Env, s: Session, resource: str, token: str, limit_ms: float, error: type[Exception]
) -> bool:
    """Poll SET NX every poll_ms until the lock is taken; after limit_ms raise `error`."""
    st = state(env)

    async def taken() -> bool:
        if await try_lock(env, s, resource, token):
            return True
        if st.waiting.get(s.index) != resource:
            st.waiting[s.index] = resource
            env.trace(name(s.index), "waits", resource=resource)
        return False

    every = env.params["poll_ms"] / 1000
    try:
        if await try_lock(env, s, resource, token):
            return True
        if limit_ms <= 0:  # a timeout of 0: one try, never seen waiting
            raise TimeoutError
        # the poll's own bound is never reached: `within` ends it at limit_ms
        return await within(
            until(taken, limit_ms / 1000 + 1, resource, every=every), limit_ms / 1000
        )
    except TimeoutError:
        raise error(f"{resource} still held after {limit_ms:g} ms") from None
    finally:
        st.waiting.pop(s.index, None)


async def waiting(env: Env, s: Session, resource: str) -> bool:
    """Whether `s` waits for `resource` right now, as Redis shows it: it polls for the lock
    and the lock is someone's (the sequencer's test of a Redis step)."""
    polling = state(env).waiting.get(s.index) == resource
    return polling and bool(await env.redis.exists(env.key(f"lock:{resource}")))


async def release(env: Env, s: Session, resource: str, token: str) -> None:
    """releaseLock: delete the lock only if it still holds our token."""
    st = state(env)
    if st.holders.get(resource, (None, ""))[1] == token:
        del st.holders[resource]
    released = await env.redis.eval(COMPARE_AND_DELETE, 1, env.key(f"lock:{resource}"), token)
    env.trace(name(s.index), "released" if released else "lease lost", resource=resource)


async def take(
    env: Env,
    s: Session,
    resource: str,
    token: str,
    hierarchy: LockHierarchy | None,
    timeout: bool,
    once: bool,
) -> bool:
    """One lock, the way a variant takes it: one try (once), else polled until taken, at most
    lock_timeout_ms (timeout)
    or watch_ms (the lab's hard limit on a wait that has none)."""
    if hierarchy is not None:  # checked before Redis is asked
        hierarchy.check(level_of(resource), resource)
    if once:
        return await try_lock(env, s, resource, token)
    limit, error = ("lock_timeout_ms", LockTimeout) if timeout else ("watch_ms", Frozen)
    got = await acquire(env, s, resource, token, env.params[limit], error)
    if hierarchy is not None:
        hierarchy.hold(level_of(resource), resource)
    return got
