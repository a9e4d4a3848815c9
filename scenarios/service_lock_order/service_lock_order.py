"""Service lock order: two independent services lock the same Redis keys in opposite order.

Symptom:    the billing service and the inventory service both hang: no error, no crash,
            no log line, both processes alive and polling Redis; nothing moves until
            someone kills them.
Root cause: "the services are independent", but they share two Redis keys and take them
            in opposite orders (billing: account A then B; inventory: B then A). Each
            holds one key (SET NX, no TTL) and polls for the other; Redis has no deadlock
            detector and nothing times out: a circular wait between two processes that
            never share a line of code.
Fix:        coordinate the order across services: both take the keys sorted (fixed); the
            second service waits for the first key, then gets both once the first is done.
Published:  no numbers; deadlock-prevention.zh.txt: 不能因为"服务不同，不会冲突";
            "服务彼此独立" -> 如果它们共享资源（数据库行、Redis 键、文件），就会发生冲突。
            行动：在各服务之间协调锁顺序。
See:        claim DP-10 in claims.py; `service` below runs in a process of its own
            (worker.py, on the harness's worker protocol, lab.procs.workers); the lab's watch of
            the freeze is in watch.py. lock-order-prevention has the same cycle between
            coroutines of one process (DP-1..DP-7). The steps: both services take their
            first key, then both ask for the second. The lab watches Redis (who holds each
            key) and the services (who waits for which); a wait-for cycle unchanged for
            freeze_window_ms, with both processes alive and still sending SETs, is the
            freeze; then both are killed by PID. A wait that ends is not a freeze: fixed
            shows one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lab.aio import until
from lab.errors import ScenarioFailure
from lab.kit.redislock import COMPARE_AND_DELETE
from lab.procs.workers import Child, Event, Worker

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from lab.core.scenario import Env

KEYS = ("lock:account:A", "lock:account:B")
SERVICES = ("billing", "inventory")
STEPS = ("first", "second")  # the lab grants each service's key, one at a time
POLL_MS = 5  # the spin: one SET NX every POLL_MS while the key is busy
HEARTBEAT_MS = 100  # a waiting service reports its tries this often
SPIN_S = 3600.0  # no timeout in the service's code: this bound only ends a forgotten process
FREEZE_WINDOW_MS = 1000  # a cycle unchanged this long is a freeze (time is the subject)
WORKER = Path(__file__).with_name("worker.py")


async def take(child: Child, redis: aioredis.Redis, key: str, token: str) -> None:
    """SET NX until it succeeds; no TTL, no detector, and no timeout the run can reach."""
    tries = {"n": 0, "beat": 0.0}

    async def got_it() -> bool:
        if await redis.set(key, token, nx=True):
            return True
        tries["n"] += 1
        if tries["n"] == 1 or time.monotonic() - tries["beat"] >= HEARTBEAT_MS / 1000:
            child.emit("waiting", key=key, tries=tries["n"])
            tries["beat"] = time.monotonic()
        return False

    await until(got_it, SPIN_S, f"SET {key} NX", every=POLL_MS / 1000)
    child.emit("holding", key=key, tries=tries["n"])


async def service(child: Child) -> str:
    """One service: take its keys in its own order (a step each), work, release both."""
    import redis.asyncio as aioredis

    cfg = child.config
    redis = aioredis.Redis.from_url(cfg["redis_url"])
    try:
        await redis.ping()
        for step, key in zip(STEPS, cfg["keys"], strict=True):
            await child.step(step)
            await take(child, redis, key, cfg["token"])
        child.emit("working")
        for key in reversed(cfg["keys"]):
            await redis.eval(COMPARE_AND_DELETE, 1, key, cfg["token"])
        child.emit("done")
        return "done"
    finally:
        await redis.aclose()


async def buggy(env: Env) -> None:
    await _run(env, (KEYS, KEYS[::-1]))  # billing A -> B, inventory B -> A


async def fixed(env: Env) -> None:
    await _run(env, (tuple(sorted(KEYS)),) * 2)  # one order for every service


async def _run(env: Env, orders: Sequence[Sequence[str]]) -> None:
    from scenarios.service_lock_order.watch import watch  # the lab's side only, not the worker's

    rng = env.rng()
    tokens = {name: f"{name}-{rng.getrandbits(64):016x}" for name in SERVICES}
    workers: list[Worker] = []
    try:
        for name, order in zip(SERVICES, orders, strict=True):
            cfg = {
                "redis_url": env.redis_url,
                "token": tokens[name],
                "keys": [env.key(k) for k in order],
            }
            workers.append(
                await Worker.spawn(
                    WORKER, cfg, name=name, ready_s=None, fork=True, on_event=_tracer(env, name)
                )
            )
        for w in workers:
            await w.wait_for("ready")
        env.t0 = time.perf_counter()
        for w in workers:  # step first: each takes its first key (or waits for it)
            w.grant("first")
        for w in workers:
            if (ev := await w.next(skip=("step",))).name not in ("holding", "waiting"):
                raise ScenarioFailure(f"{w.name}: {ev.name} {ev.fields} after its first grant")
        for w in workers:  # step second: each asks for its second key
            w.grant("second")
        await watch(env, workers, KEYS, {tokens[n]: n for n in SERVICES})
    finally:
        for w in workers:
            await w.close()


def _tracer(env: Env, name: str) -> Callable[[Event], None]:
    """Each service event on the run's trace, on the service's clock; left out: heartbeats,
    the protocol's own events, and `ready` (it comes before the run's clock starts)."""

    def on_event(ev: Event) -> None:
        beat = ev.name == "waiting" and ev.fields["tries"] > 1
        if ev.name not in ("ready", "step", "returned", "exit") and not beat:
            env.trace(name, ev.name, at_ms=ev.at_ms(env.t0), **ev.fields)

    return on_event
