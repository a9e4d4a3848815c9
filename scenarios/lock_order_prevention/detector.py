"""The lab's view of a run (per-run state on env.state) and its detector (DP-7).

The transfers tell the run state who holds which lock and who polls for which; the
detector, an observer the harness starts after setup and stops after the variant, takes
a snapshot every observe_ms (no await inside one), builds the document's wait-for graph
from it and keeps every new cycle with Redis's view of the locks it names (holder's token,
PTTL). At stop it leaves evidence: wait_for_cycles, wait_for_graph, detector and the
leases still held after the run (those of workers the lab stopped: they release nothing).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from lab.aio import until, within
from lab.core.scenario import Env, Observer
from scenarios.lock_order_prevention.checkers import WaitForGraph

KEY = "lock-order-prevention"
WATCH_LIMIT_S = 3600.0  # the detector's own bound; the harness's run timeout ends runs first
STOP_S = 10.0


@dataclass
class RunState:
    holders: dict[str, tuple[int, str]] = field(default_factory=dict)  # resource -> worker, token
    waiting: dict[int, str] = field(default_factory=dict)  # worker -> resource it polls for
    tokens: Counter[int] = field(default_factory=Counter)  # worker -> locks it asked for
    rngs: dict[int, random.Random] = field(default_factory=dict)
    inside: Counter[str] = field(default_factory=Counter)  # account -> transfers touching it
    moved: Counter[str] = field(default_factory=Counter)  # account -> committed net change
    running: int = 0
    violations: list[str] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)  # every lock a run may leave behind
    snapshots: int = 0
    busiest: dict[str, Any] = field(default_factory=dict)  # the snapshot with the most waits
    graph: dict[str, Any] = field(default_factory=dict)  # the snapshot where a cycle was new
    cycles: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


async def new_state(env: Env, resources: list[str]) -> RunState:
    """The run's state (`resources`: every lock a run may leave behind), and one Redis
    connection per worker opened before the clock starts."""
    st = env.state[KEY] = RunState(resources=resources)
    pool = env.redis.connection_pool
    opened = (pool.get_connection() for _ in range(env.n))  # type: ignore[no-untyped-call]
    for c in await asyncio.gather(*opened):
        await pool.release(c)
    return st


def state(env: Env) -> RunState:
    st: RunState = env.state[KEY]
    return st


def name(worker: int) -> str:
    return f"worker-{worker}"


@contextmanager
def transferring(env: Env, src: str, dst: str) -> Iterator[None]:
    """The lab's view of one transfer in its critical section: how many touch each account
    (overlaps) and how many run at once; a transfer that ends well moved 1 from src to dst."""
    st = state(env)
    for a in (src, dst):
        st.inside[a] += 1
        if st.inside[a] > 1:
            env.add("overlaps")
    st.running += 1
    env.counters["max_concurrent_transfers"] = max(
        env.counters["max_concurrent_transfers"], st.running
    )
    try:
        yield
        env.add("committed")
        st.moved[src] -= 1
        st.moved[dst] += 1
    finally:
        st.running -= 1
        for a in (src, dst):
            st.inside[a] -= 1


def rng(env: Env, worker: int) -> random.Random:
    """The worker's own random source (backoff jitter), seeded from the run's seed."""
    return state(env).rngs.setdefault(worker, env.rng(worker))


async def _start(env: Env) -> None:
    state(env).task = asyncio.create_task(_watch(env))


async def _watch(env: Env) -> None:
    every = env.params["observe_ms"] / 1000
    await until(lambda: _look(env), WATCH_LIMIT_S, "the detector", every=every)


async def _look(env: Env) -> bool:
    """One snapshot of holders and waiters; True once the detector is asked to stop."""
    st = state(env)
    if st.stop.is_set():
        return True
    holds = {r: (name(w), token) for r, (w, token) in st.holders.items()}
    waits = {name(w): r for w, r in st.waiting.items() if r in st.holders}
    graph = WaitForGraph()
    for waiter, resource in waits.items():
        graph.record_waiting(waiter, holds[resource][0])
    st.snapshots += 1
    snapshot = {
        "t_ms": round(env.now_ms(), 1),
        "held": {r: {"by": h} for r, (h, _) in holds.items()},
        "waiting": waits,
    }
    if len(waits) > len(st.busiest.get("waiting", {})):
        st.busiest = snapshot
    new = [c for c in graph.cycles() if tuple(c) not in st.cycles]
    if new:
        await _confirm(env, snapshot, holds, new)
    return False


async def _confirm(
    env: Env, snapshot: dict[str, Any], holds: dict[str, tuple[str, str]], new: list[list[str]]
) -> None:
    """Keep the new cycles, with Redis's view of every held lock: whose token, what PTTL."""
    st = state(env)
    pipe = env.redis.pipeline(transaction=False)
    for resource in holds:
        pipe.get(env.key(f"lock:{resource}"))
        pipe.pttl(env.key(f"lock:{resource}"))
    replies = await pipe.execute()
    for i, (resource, (_, token)) in enumerate(holds.items()):
        value, pttl = replies[2 * i], replies[2 * i + 1]
        in_redis = value.decode() if isinstance(value, bytes) else value
        snapshot["held"][resource].update(redis_agrees=in_redis == token, pttl_ms=int(pttl))
    st.graph = snapshot
    waits, held = snapshot["waiting"], snapshot["held"]
    for members in new:
        st.cycles[tuple(members)] = {
            "members": members,
            "waits": [f"{m} waits for {waits[m]}, held by {held[waits[m]]['by']}" for m in members],
            "seen_ms": snapshot["t_ms"],
            "redis_agrees": all(held[waits[m]]["redis_agrees"] for m in members),
        }
        env.trace("detector", "cycle", members=members)


async def _stop(env: Env) -> None:
    st = state(env)
    st.stop.set()
    if st.task is not None:
        await within(st.task, STOP_S)
    pipe = env.redis.pipeline(transaction=False)
    for resource in st.resources:
        pipe.pttl(env.key(f"lock:{resource}"))
    left = await pipe.execute()
    env.extra_evidence.update(
        wait_for_cycles=list(st.cycles.values()),
        wait_for_graph=st.graph or st.busiest,
        detector={"snapshots": st.snapshots, "every_ms": env.params["observe_ms"]},
        locks_left_pttl_ms=[int(p) for p in left if int(p) > 0],  # leases of stopped workers
    )
    if st.violations:
        env.extra_evidence["hierarchy_violations"] = st.violations


DETECTOR = Observer("wait-for graph", _start, _stop)
