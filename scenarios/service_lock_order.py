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
See:        claim DP-10; scenarios/_order_worker.py (a service: a process of its own);
            lock-order-prevention (the same cycle between coroutines of one process,
            DP-1..DP-7). The steps: both services take their first key, then both ask for
            the second. The lab watches Redis (who holds each key) and the services (who
            waits for which); a wait-for cycle unchanged for freeze_window_ms, with both
            processes alive and still sending SETs, is the freeze; then both are killed
            by PID. A wait that ends is not a freeze: fixed shows one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lab.claims import Claim, Record
from lab.errors import LabError, ScenarioFailure
from lab.scenario import Defaults, Env, Scenario
from scenarios._order_worker import Service
from scenarios.lease_gc_pause import _proc_state

KEYS = ("lock:account:A", "lock:account:B")
SERVICES = ("billing", "inventory")
FREEZE_WINDOW_MS = 1000  # a cycle unchanged this long is a freeze (time is the subject)
OBSERVE_MS = 10  # how often the lab reads both keys
GIVE_UP_S = 20.0  # neither done nor frozen by then: the run fails, named


async def buggy(env: Env) -> None:
    await _run(env, (KEYS, KEYS[::-1]))  # billing A -> B, inventory B -> A


async def fixed(env: Env) -> None:
    await _run(env, (tuple(sorted(KEYS)),) * 2)  # one order for every service


async def _run(env: Env, orders: Sequence[Sequence[str]]) -> None:
    rng = env.rng()
    tokens = {name: f"{name}-{rng.getrandbits(64):016x}" for name in SERVICES}
    services: list[Service] = []
    try:
        for name, order in zip(SERVICES, orders, strict=True):
            cfg = {"redis_url": env.redis_url, "token": tokens[name],
                   "keys": [env.key(k) for k in order]}  # fmt: skip
            services.append(await Service.start(env, name, cfg))
        for s in services:
            await s.expect("ready")
        env.t0 = time.perf_counter()
        for s in services:  # step 1: each takes its first key (or waits for it)
            await s.grant()
        for s in services:
            await s.expect("holding", "waiting")
        for s in services:  # step 2: each asks for its second key
            await s.grant()
        await _watch(env, services, {tokens[n]: n for n in SERVICES})
    finally:
        for s in services:
            await s.close()


async def _watch(env: Env, services: list[Service], owners: Mapping[str, str]) -> None:
    """Until both are done, or a wait-for cycle has stood still for the freeze window."""
    keys = [env.key(k) for k in KEYS]
    window = env.params["freeze_window_ms"]
    since: float | None = None
    start: dict[str, Any] = {}
    deadline = time.monotonic() + window / 1000 + GIVE_UP_S
    while time.monotonic() < deadline:
        if all("done" in s.last for s in services):
            for _ in services:
                env.outcome("done")
            return
        values = [v.decode() if isinstance(v, bytes) else v for v in await env.redis.mget(keys)]
        holders = {k: owners.get(v, "?") if v else None for k, v in zip(keys, values, strict=True)}
        waits = {s.name: s.last["waiting"]["key"] for s in services
                 if _state(s) == "waiting"}  # fmt: skip
        cycle = len(waits) == 2 and all(holders[k] not in (None, w) for w, k in waits.items())
        if not cycle:
            since = None
        elif since is None:
            since, start = env.now_ms(), await _snapshot(env, services)
        elif env.now_ms() - since >= window:
            end = await _snapshot(env, services)
            env.extra_evidence["freeze"] = {
                "holders": {k.removeprefix(env.prefix): h for k, h in holders.items()},
                "waits_for": {w: k.removeprefix(env.prefix) for w, k in waits.items()},
                "cycle": [
                    f"{w} waits for {k.removeprefix(env.prefix)}, held by {holders[k]}"
                    for w, k in waits.items()
                ],
                "window_ms": round(env.now_ms() - since, 1),
                "tries": {n: [start["tries"][n], end["tries"][n]] for n in end["tries"]},
                "redis_set_calls": end["set_calls"] - start["set_calls"],
                "process_state": end["state"],
            }
            env.trace("lab", "frozen: killing both by PID", window_ms=round(env.now_ms() - since))
            for s in services:
                await s.close()
                env.outcome("frozen")
            return
        await asyncio.sleep(OBSERVE_MS / 1000)
    raise ScenarioFailure(f"{env.scenario} / {env.variant}: neither done nor frozen")


def _state(s: Service) -> str:
    """The service's latest step: waiting, holding, working or done."""
    seen = [e for e in ("waiting", "holding", "working", "done") if e in s.last]
    return max(seen, key=lambda e: s.last[e]["t_ms"]) if seen else ""


async def _snapshot(env: Env, services: list[Service]) -> dict[str, Any]:
    stats = await env.redis.info("commandstats")
    return {
        "tries": {s.name: s.last["waiting"]["tries"] for s in services},
        "set_calls": int(stats.get("cmdstat_set", {}).get("calls", 0)),
        "state": {s.name: _proc_state(s.proc.pid) for s in services},
    }


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["freeze_window_ms"] < 50:
        raise LabError(f"-p freeze_window_ms={p['freeze_window_ms']}: at least 50")


# --- claims ----------------------------------------------------------------------------------


def _frozen(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    f = rec["evidence"].get("freeze", {})
    tries = f.get("tries", {})
    held = (rec["outcomes"] == {"frozen": 2} and len(f.get("cycle", [])) == 2
            and all(b > a for a, b in tries.values()) and f.get("redis_set_calls", 0) > 0
            and all(s in ("S", "R") for s in f.get("process_state", {}).values()))  # fmt: skip
    return held, (
        f"buggy: {'; '.join(f.get('cycle', [])) or 'no cycle'}; unchanged {f.get('window_ms')} ms "
        f"while both kept polling (tries {tries}, Redis counted {f.get('redis_set_calls')} SETs),"
        f" processes alive ({f.get('process_state')}), no error; then killed by PID"
    )


def _completes(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    held = rec["outcomes"] == {"done": 2} and "freeze" not in rec["evidence"]
    return held, f"fixed (sorted keys): {rec['outcomes']} in {rec.get('wall_ms', 0):.0f} ms"


PUBLISHED = "如果它们共享资源（数据库行、Redis 键、文件），就会发生冲突"
CLAIMS = (
    Claim("DP-10", "buggy: two services with opposite orders on the same Redis keys freeze "
          "each other: no error, no crash, no progress", ("buggy",), _frozen, PUBLISHED),
    Claim("DP-10", "fixed: the same services with one order across them both complete",
          ("fixed",), _completes, "在各服务之间协调锁顺序"),
)  # fmt: skip

SCENARIO = Scenario(
    id="service-lock-order",
    validate=validate,
    doc=__doc__ or "",
    kind="script",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("done", "frozen"),
    claims=CLAIMS,
    defaults=Defaults(n=2, actor_timeout_s=30, run_timeout_s=60),
    params={"freeze_window_ms": FREEZE_WINDOW_MS},
    param_help={"freeze_window_ms": "a wait-for cycle unchanged this long counts as a freeze"},
    uses=frozenset({"redis"}),
    sources=("DP",),
    quick={"freeze_window_ms": 300},
)
