"""Lock order prevention: Redis locks taken in opposite order freeze without a word.

Symptom:    transfers between two accounts hang: no error, no crash, no log line; the
            workers poll Redis until the lab's hard limit stops them (`timeout`), and
            like killed processes they release nothing: their leases run on.
Root cause: each transfer locks its source, then its destination (transferAtoB /
            transferBtoA), with SET NX PX (locks.py): s1 holds account:0 and polls for
            account:1, s2 the reverse: Redis has no detector, the lease outlives the wait.
Fix:        the variants differ only in how the locks are taken. fixed: sorted ids (no
            circular wait). fixed-trylock: one try per lock, on a busy one release all,
            back off 2**attempt * 10 + U(0, 50) ms (no hold and wait). fixed-coarse: one
            lock for all. Not fixes: timeout-only (`lock_timeout` after lock_timeout_ms:
            the cycle still forms); hierarchy-check (checkers.py: the document's
            HierarchicalLock rejects the reversed path, it does not transfer).
Published:  no numbers; the document's sentences (deadlock-prevention.zh.txt), in claims.py.
Forcing:    pinned, schedule both-first (each asks for its first lock before either asks
            for its second); as a load, a burst (every first SET reaches Redis first).
See:        claims DP-1..DP-7 (claims.py); detector.py draws the wait-for graph.
"""

from __future__ import annotations

import asyncio
from functools import partial

from lab.core.scenario import Env
from lab.core.steps import Pinned, Session, SessionCode, schedule

from .checkers import HierarchyViolation, LockHierarchy, level_of
from .detector import name, new_state, rng, state, transferring
from .locks import Frozen, LockTimeout, new_token, release, take, waiting

INITIAL_BALANCE = 1000
COARSE = "transfer-system"
BACKOFF_BASE_MS, BACKOFF_JITTER_MS = 10.0, 50.0  # Math.pow(2, attempt) * 10 + Math.random() * 50


def source_first(s: Session) -> list[str]:
    """Worker 2k moves 1 from account 2k to 2k+1, worker 2k+1 back: opposite orders."""
    low = s.index - s.index % 2
    return [f"account:{a}" for a in ((low, low + 1) if s.index % 2 == 0 else (low + 1, low))]


def balance(env: Env, resource: str) -> str:
    return env.key(f"balance:{resource}")


async def setup(env: Env) -> None:
    ids = [f"account:{a}" for a in range(env.n + env.n % 2)]
    await new_state(env, [*ids, COARSE])  # and a Redis connection per worker, opened now
    await env.redis.mset({balance(env, a): INITIAL_BALANCE for a in ids})


CODE: dict[str, SessionCode] = {  # the same transfer; one way of taking the locks each
    "buggy": lambda env, s: transfer(env, s, source_first(s)),
    "fixed": lambda env, s: transfer(env, s, sorted(source_first(s), key=level_of)),  # DL-6
    "timeout-only": lambda env, s: transfer(env, s, source_first(s), timeout=True),
    "fixed-trylock": lambda env, s: transfer(
        env, s, source_first(s), tries=env.params["max_tries"]
    ),
    "fixed-coarse": lambda env, s: transfer(env, s, [COARSE]),
    "hierarchy-check": lambda env, s: transfer(env, s, source_first(s), hierarchy=LockHierarchy()),
}


def _reply(ok: bool) -> str:
    return "OK" if ok else "(nil)"


async def transfer(
    env: Env,
    s: Session,
    locks: list[str],
    *,
    timeout: bool = False,
    tries: int = 0,
    hierarchy: LockHierarchy | None = None,
) -> str:
    """Take `locks` in this order, move 1 from source to destination, release all. With
    `tries`, acquireMultipleLocks: one try per lock, on a busy one release all, back off."""
    held: list[tuple[str, str]] = []  # (resource, token) in the order taken
    try:
        for attempt in range(max(tries, 1)):
            env.add("attempts")
            for resource in locks:
                token = new_token(env, s)
                step = f"{f'retry{attempt}' if attempt else 'lock'}-{resource.rsplit(':', 1)[-1]}"
                shown = f"SET lock:{resource} {token} NX PX {env.params['lock_ttl_ms']}"
                taking = partial(take, env, s, resource, token, hierarchy, timeout, tries > 0)
                waits = partial(waiting, env, s, resource)
                got = await s.step(step, taking, shown=shown, result=_reply, waits=waits)
                if not got:
                    break
                held.append((resource, token))
            else:
                env.sample("attempts_per_transfer", attempt + 1)
                await move(env, s, *source_first(s))
                return "ok"
            for resource, token in reversed(held):  # release all, then back off
                await release(env, s, resource, token)
            held.clear()
            jitter_ms = rng(env, s.index).uniform(0, BACKOFF_JITTER_MS)
            await s.other_logic((2**attempt * BACKOFF_BASE_MS + jitter_ms) / 1000)  # backoff
        return "gave_up"
    except LockTimeout:
        return "lock_timeout"
    except HierarchyViolation as exc:
        state(env).violations.append(f"{name(s.index)}: {exc}")
        return "hierarchy_violation"
    except (asyncio.CancelledError, Frozen):  # stopped by the lab: like a killed process it
        held.clear()  # releases nothing, its leases run until PX
        raise
    finally:
        for resource, token in reversed(held):
            await release(env, s, resource, token)


async def move(env: Env, s: Session, src: str, dst: str) -> None:
    """doTransfer: read both balances, work critical_ms, write both: safe only under the locks."""
    with transferring(env, src, dst):
        src_key, dst_key = balance(env, src), balance(env, dst)
        have = await env.redis.mget(src_key, dst_key)
        await s.other_logic(env.params["critical_ms"] / 1000)
        await env.redis.mset({src_key: int(have[0] or -1) - 1, dst_key: int(have[1] or -1) + 1})


SOURCE_FIRST = {"s1": ("lock-0", "lock-1"), "s2": ("lock-1", "lock-0")}
CROSS = schedule("s1 lock-0, s2 lock-1, s1 lock-1, s2 lock-0")
TRYLOCK = schedule("s1 lock-0, s2 lock-1, s1 lock-1, s2 lock-0, s1 retry1-0, s1 retry1-1")
PINNED = Pinned(
    code=CODE,
    steps={
        **dict.fromkeys(("buggy", "timeout-only", "hierarchy-check"), SOURCE_FIRST),
        "fixed": {"s1": ("lock-0", "lock-1"), "s2": ("lock-0", "lock-1")},
        "fixed-trylock": {
            "s1": (*SOURCE_FIRST["s1"], "retry1-0", "retry1-1"),
            "s2": (*SOURCE_FIRST["s2"], "retry1-1", "retry1-0"),
        },
        "fixed-coarse": {"s1": ("lock-transfer-system",), "s2": ("lock-transfer-system",)},
    },
    schedules={  # both-first: both hold their first lock when they ask for the second
        **{v: {"both-first": CROSS} for v in ("buggy", "timeout-only", "hierarchy-check")},
        "fixed": {"both-first": schedule("s1 lock-0, s2 lock-0, s1 lock-1, s2 lock-1")},
        "fixed-trylock": {"both-first": TRYLOCK},
        "fixed-coarse": {"both-first": ("s1 lock-transfer-system", "s2 lock-transfer-system")},
    },
    # pinned, the schedule decides who times out, not a race of two timers: a lock timeout of 0
    # (one try); a frozen wait stopped after 200 ms (40 polls; a schedule ends its waits sooner)
    params={"lock_timeout_ms": 0.0, "watch_ms": 200.0, "max_tries": 2},
)
