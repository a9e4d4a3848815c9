"""Lock order prevention: Redis locks taken in opposite order freeze without a word.

Symptom:    transfers between two accounts hang: no error, no crash, no log line; the
            workers poll Redis and never finish. Here the harness's hard per-actor timeout
            kills them (`timeout`); like killed processes they release nothing, and their
            leases run on for lock_ttl_ms (evidence.locks_left_pttl_ms).
Root cause: each worker locks its source account, then its destination (the document's
            transferAtoB / transferBtoA): worker 0 holds account:0 and polls for account:1
            while worker 1 holds account:1 and polls for account:0. Redis locks
            (`SET lock token NX PX ttl`, released by a Lua compare-and-delete) have no
            deadlock detector, and the lease outlives the wait: mutual exclusion, hold and
            wait, no preemption and circular wait all hold.
Fix:        break one condition; every variant runs the same transfers and differs only in
            how it takes the locks. fixed: one global order (sorted account ids), no
            circular wait. fixed-trylock: try each lock once; on a busy one release all
            and retry after 2**attempt * 10 + U(0, 50) ms, at most 10 attempts: no hold and
            wait (the document also sorts; here the order stays inconsistent, to show that
            release-all alone is enough). fixed-coarse: one `transfer-system` lock: nothing
            to form a cycle with, and nothing runs in parallel. Not fixes: timeout-only
            polls each lock at most lock_timeout_ms, then fails with `lock_timeout`: the
            cycle still forms and costs the timeout. hierarchy-check applies the document's
            HierarchicalLock check (a new lock's level must be greater than every level
            held; accounts are levels (ACCOUNT, id), since `level <= heldLevel` forbids two
            locks on one level) and rejects the reversed path with `hierarchy_violation`:
            it finds the bug in a test, it does not make the transfer.
Detector:   in every variant an observer snapshots every observe_ms who holds which lock
            and who polls for which, builds the wait-for graph (the document's
            DeadlockDetector) and keeps its cycles with Redis's view of the locks (holder's
            token, PTTL): evidence.wait_for_graph, evidence.wait_for_cycles.
Forcing:    workers 2k and 2k+1 move money between accounts 2k and 2k+1, in opposite
            directions. A worker asks for its first lock, then waits (at most barrier_ms)
            until its partner has asked for its own first lock before asking for the
            second: in buggy both hold one lock when they ask for the other, every time.
Published:  no numbers; the document's sentences, verbatim (deadlock-prevention.zh.txt):
            死锁会导致永久冻结——没有崩溃，没有错误，只有沉默。
            锁顺序不一致，必然最终导致死锁。
            最实用的方法：通过保持顺序一致来打破循环等待。
            超时是安全网，不是解决方案。
            超时只能缓解症状，死锁依然会发生。
            3. Try-Lock 并退避（打破占有并等待条件）
            Trade-off: Less parallelism, but no deadlock risk
            有序加锁能实现并行处理，死锁则会扼杀并行处理。
            Cannot acquire ${level} while holding ${heldLevel}
            已设置死锁检测／监控
Knobs:      -n workers (pairs; an odd last worker has its accounts to itself). The hard
            limit (--actor-timeout, 2 s) is how long the freeze is watched; fixed-coarse
            needs it above n x critical_ms, or its last workers time out in the queue.
            -p lock_ttl_ms=500 (a lease shorter than the freeze): the leases expire, both
            workers of a pair take both locks, and buggy "completes" with every invariant
            broken (at n=10: 10 overlaps, every balance off by one).
See:        claims DP-1..DP-7; checkout-deadlock (PostgreSQL detects the same cycle and
            fails one side with 40P01 after deadlock_timeout).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from lab.aio import within
from lab.claims import Claim, Record, invariants_hold
from lab.errors import LabError
from lab.outcome import notation
from lab.redislock import COMPARE_AND_DELETE
from lab.scenario import Check, Defaults, Env, Scenario

if TYPE_CHECKING:
    import asyncpg

N_WORKERS = 10  # 5 pairs of accounts
CRITICAL_MS = 50.0  # the transfer's work while it holds its locks
POLL_MS = 5.0  # waiting for a lock: one SET NX every poll_ms x U(1, 2)
LOCK_TTL_MS = 30_000  # a lease far longer than any run here: the freeze does not end by itself
LOCK_TIMEOUT_MS = 300.0  # timeout-only (the document: acquireWithTimeout(..., 5000))
BARRIER_MS = 1000.0
MAX_TRIES = 10  # acquireMultipleLocks(resources, maxRetries = 10)
BACKOFF_BASE_MS = 10.0  # Math.pow(2, attempt) * 10 + Math.random() * 50
BACKOFF_JITTER_MS = 50.0
OBSERVE_MS = 10.0
ACTOR_TIMEOUT_S = 2.0  # the harness's hard limit: what ends the freeze
INITIAL_BALANCE = 1000
COARSE = "transfer-system"


# --- the document's two checkers, pure Python ------------------------------------------


class LockLevel(IntEnum):
    """The document's levels: always acquire parent before child."""

    SYSTEM = 0
    REGION = 1
    ACCOUNT = 2
    TRANSACTION = 3


Level = tuple[LockLevel, int]  # (level, rank inside the level)


class HierarchyViolation(Exception):
    """LockHierarchyViolation: a lock at or above a level already held."""


class LockHierarchy:
    """The document's HierarchicalLock check (DP-6): a new lock's level must be greater than
    every level held (parent before child)."""

    def __init__(self) -> None:
        self.held: dict[Level, str] = {}

    def check(self, level: Level, resource: str) -> None:
        for held_level, held in self.held.items():
            if level <= held_level:
                raise HierarchyViolation(
                    f"Cannot acquire {resource} {_lv(level)} while holding {held} {_lv(held_level)}"
                )

    def hold(self, level: Level, resource: str) -> None:
        self.held[level] = resource


def _lv(level: Level) -> str:
    return f"({level[0].name}, {level[1]})"


def level_of(resource: str) -> Level:
    """account:<id> sits at (ACCOUNT, id)."""
    return LockLevel.ACCOUNT, int(resource.split(":")[1])


class WaitForGraph:
    """The document's DeadlockDetector (DP-7): who waits for whom; a cycle is a deadlock."""

    def __init__(self) -> None:
        self.waits: dict[str, set[str]] = {}

    def record_waiting(self, waiter: str, holder: str) -> None:
        self.waits.setdefault(waiter, set()).add(holder)

    def cycles(self) -> list[list[str]]:
        """Each cycle once, from its smallest member. A waiter queued behind a cycle is
        blocked by it but is not one of its members."""
        found: set[tuple[str, ...]] = set()
        done: set[str] = set()

        def walk(path: list[str]) -> None:
            for nxt in sorted(self.waits.get(path[-1], ())):
                if nxt in path:
                    cycle = path[path.index(nxt) :]
                    i = cycle.index(min(cycle))
                    found.add(tuple(cycle[i:] + cycle[:i]))
                elif nxt not in done:
                    walk([*path, nxt])
            done.add(path[-1])

        for start in sorted(self.waits):
            if start not in done:
                walk([start])
        return [list(c) for c in sorted(found)]


# --- per-run state: the lab's view of holders and waiters -------------------------------


class LockTimeout(Exception):
    """acquireWithTimeout returned null: the caller fails the transfer."""


class GaveUp(Exception):
    """DeadlockPreventionError: every try-lock attempt found a lock busy."""


@dataclass
class RunState:
    holders: dict[str, tuple[int, str]] = field(default_factory=dict)  # resource -> worker, token
    waiting: dict[int, str] = field(default_factory=dict)  # worker -> resource it polls for
    tried: dict[int, asyncio.Event] = field(default_factory=dict)  # asked for its first lock
    rngs: dict[int, random.Random] = field(default_factory=dict)
    inside: Counter[int] = field(default_factory=Counter)  # account -> transfers touching it
    moved: Counter[int] = field(default_factory=Counter)  # account -> committed net change
    running: int = 0
    ended: int = 0
    snapshots: int = 0
    busiest: dict[str, Any] = field(default_factory=dict)  # the snapshot with the most waits
    graph: dict[str, Any] = field(default_factory=dict)  # the snapshot where a cycle was new
    cycles: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    observer: asyncio.Task[None] | None = None


_RUNS: weakref.WeakKeyDictionary[Env, RunState] = weakref.WeakKeyDictionary()


def _st(env: Env) -> RunState:
    return _RUNS[env]


def _name(worker: int) -> str:
    return f"worker-{worker}"


def accounts(worker: int) -> tuple[int, int]:
    """(source, destination): worker 2k moves from account 2k to 2k+1, worker 2k+1 back."""
    low = worker - worker % 2
    return (low, low + 1) if worker % 2 == 0 else (low + 1, low)


def _balance(env: Env, account: int) -> str:
    return env.key(f"balance:{account}")


def _int(value: bytes | str | None) -> int:
    return int(value if value is not None else -1)


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["lock_ttl_ms"] < 1 or p["max_tries"] < 1 or p["observe_ms"] <= 0:
        raise LabError("-p lock_ttl_ms and max_tries must be >= 1, observe_ms > 0")
    if min(p["poll_ms"], p["critical_ms"], p["lock_timeout_ms"], p["barrier_ms"]) < 0:
        raise LabError("-p poll_ms, critical_ms, lock_timeout_ms and barrier_ms must be >= 0")


async def setup(env: Env) -> None:
    st = _RUNS[env] = RunState()
    await env.redis.mset({_balance(env, a): INITIAL_BALANCE for a in range(env.n + env.n % 2)})
    pool = env.redis.connection_pool  # one connection per worker, opened before the clock
    conns = await asyncio.gather(*(pool.get_connection() for _ in range(env.n)))  # type: ignore[no-untyped-call]
    for c in conns:
        await pool.release(c)
    st.observer = asyncio.create_task(_observe(env))


# --- the variants: same transfer, same load, one acquisition policy each -----------------

Held = list[tuple[str, str]]  # (resource, token) in the order taken
Policy = Callable[[Env, int, list[str], Held], Awaitable[None]]


def _source_first(worker: int) -> list[str]:
    """lockAccount(fromId); lockAccount(toId): opposite for the two workers of a pair."""
    return [f"account:{a}" for a in accounts(worker)]


async def buggy(env: Env, conn: asyncpg.Connection | None, worker: int) -> str:
    return await _transfer(env, worker, _source_first(worker), _blocking)


async def fixed(env: Env, conn: asyncpg.Connection | None, worker: int) -> str:
    ordered = sorted(_source_first(worker), key=level_of)  # numeric ids, not strings (DL-6)
    return await _transfer(env, worker, ordered, _blocking)


async def timeout_only(env: Env, conn: asyncpg.Connection | None, worker: int) -> str:
    return await _transfer(env, worker, _source_first(worker), _timed)


async def fixed_trylock(env: Env, conn: asyncpg.Connection | None, worker: int) -> str:
    return await _transfer(env, worker, _source_first(worker), _try_all)


async def fixed_coarse(env: Env, conn: asyncpg.Connection | None, worker: int) -> str:
    return await _transfer(env, worker, [COARSE], _blocking)


async def hierarchy_check(env: Env, conn: asyncpg.Connection | None, worker: int) -> str:
    return await _transfer(env, worker, _source_first(worker), _checked)


async def _transfer(env: Env, worker: int, resources: list[str], policy: Policy) -> str:
    """Take the locks `policy`'s way, move 1 from source to destination, release all."""
    st = _st(env)
    held: Held = []
    try:
        await policy(env, worker, resources, held)
        await _move(env, *accounts(worker))
        return "ok"
    except LockTimeout as exc:
        env.trace(_name(worker), "lock_timeout", resource=str(exc))
        return "lock_timeout"
    except GaveUp:
        return "gave_up"
    except HierarchyViolation as exc:
        st.violations.append(f"{_name(worker)}: {exc}")
        env.trace(_name(worker), "hierarchy_violation", detail=str(exc))
        return "hierarchy_violation"
    except asyncio.CancelledError:  # the hard timeout kills the worker: like a killed
        held.clear()  # process it releases nothing, its leases run until PX
        raise
    finally:
        st.ended += 1
        while held:  # in reverse order
            await _release(env, worker, *held.pop())


async def _blocking(env: Env, worker: int, resources: list[str], held: Held) -> None:
    await _in_order(env, worker, resources, held)


async def _timed(env: Env, worker: int, resources: list[str], held: Held) -> None:
    await _in_order(env, worker, resources, held, wait_ms=env.params["lock_timeout_ms"])


async def _checked(env: Env, worker: int, resources: list[str], held: Held) -> None:
    await _in_order(env, worker, resources, held, hierarchy=LockHierarchy())


async def _in_order(
    env: Env,
    worker: int,
    resources: list[str],
    held: Held,
    wait_ms: float | None = None,
    hierarchy: LockHierarchy | None = None,
) -> None:
    """lockAccount(first); lockAccount(second): each waited for, at most wait_ms."""
    for i, resource in enumerate(resources):
        if i == 1:
            await _meet(env, worker)
        if hierarchy is not None:  # checked before Redis is asked
            hierarchy.check(level_of(resource), resource)
        held.append((resource, await _acquire(env, worker, resource, wait_ms)))
        if hierarchy is not None:
            hierarchy.hold(level_of(resource), resource)


async def _try_all(env: Env, worker: int, resources: list[str], held: Held) -> None:
    """acquireMultipleLocks: one try per lock; on a busy one release all, back off, retry."""
    rng = _rng(env, worker)
    for attempt in range(env.params["max_tries"]):
        env.add("attempts")
        for i, resource in enumerate(resources):
            if i == 1 and attempt == 0:
                await _meet(env, worker)
            token = _token(worker)
            if not await _try(env, worker, resource, token):
                break
            held.append((resource, token))
        else:
            env.sample("attempts_per_transfer", attempt + 1)
            return
        while held:
            await _release(env, worker, *held.pop())
        backoff_ms = 2**attempt * BACKOFF_BASE_MS + rng.uniform(0, BACKOFF_JITTER_MS)
        await asyncio.sleep(backoff_ms / 1000)
    raise GaveUp


async def _move(env: Env, src: int, dst: int) -> None:
    """doTransfer: read both balances, work critical_ms, write both: safe only under the locks."""
    st = _st(env)
    for a in (src, dst):
        st.inside[a] += 1
        if st.inside[a] > 1:
            env.add("overlaps")
    st.running += 1
    env.counters["max_concurrent_transfers"] = max(
        env.counters["max_concurrent_transfers"], st.running
    )
    try:
        have = await env.redis.mget(_balance(env, src), _balance(env, dst))
        await asyncio.sleep(env.params["critical_ms"] / 1000)
        new = {_balance(env, src): _int(have[0]) - 1, _balance(env, dst): _int(have[1]) + 1}
        await env.redis.mset(new)
        env.add("committed")
        st.moved[src] -= 1
        st.moved[dst] += 1
    finally:
        st.running -= 1
        for a in (src, dst):
            st.inside[a] -= 1


# --- the lock: SET NX PX, compare-and-delete, and the forced interleaving ---------------


def _token(worker: int) -> str:
    return f"{_name(worker)}:{uuid.uuid4().hex[:12]}"


def _rng(env: Env, worker: int) -> random.Random:
    st = _st(env)
    if worker not in st.rngs:
        st.rngs[worker] = env.rng(worker)
    return st.rngs[worker]


def _tried(env: Env, worker: int) -> asyncio.Event:
    return _st(env).tried.setdefault(worker, asyncio.Event())


async def _try(env: Env, worker: int, resource: str, token: str) -> bool:
    """tryAcquireLock: one SET lock:<resource> <token> NX PX lock_ttl_ms."""
    env.add("set_nx")
    ttl = int(env.params["lock_ttl_ms"])
    taken = bool(await env.redis.set(env.key(f"lock:{resource}"), token, nx=True, px=ttl))
    if (task := asyncio.current_task()) is not None and task.cancelling():
        raise asyncio.CancelledError  # redis-py 8.1 can return from a command it was cancelled in
    _tried(env, worker).set()
    if taken:
        _st(env).holders[resource] = (worker, token)
        env.trace(_name(worker), "holds", resource=resource)
    return taken


async def _acquire(env: Env, worker: int, resource: str, wait_ms: float | None) -> str:
    """Poll SET NX until the lock is taken; with wait_ms, raise LockTimeout after it."""
    st = _st(env)
    rng = _rng(env, worker)
    token = _token(worker)
    deadline = None if wait_ms is None else time.monotonic() + wait_ms / 1000
    try:
        while not await _try(env, worker, resource, token):
            if deadline is not None and time.monotonic() >= deadline:
                raise LockTimeout(resource)
            if st.waiting.get(worker) != resource:
                st.waiting[worker] = resource
                env.trace(_name(worker), "waits", resource=resource)
            await asyncio.sleep(env.params["poll_ms"] / 1000 * rng.uniform(1, 2))
    finally:
        st.waiting.pop(worker, None)
    return token


async def _release(env: Env, worker: int, resource: str, token: str) -> None:
    st = _st(env)
    if st.holders.get(resource, (None, ""))[1] == token:
        del st.holders[resource]
    released = await env.redis.eval(COMPARE_AND_DELETE, 1, env.key(f"lock:{resource}"), token)
    env.trace(_name(worker), "released" if released else "lease lost", resource=resource)


async def _meet(env: Env, worker: int) -> None:
    """The forced interleaving: wait until the partner has asked for its first lock."""
    partner = worker ^ 1
    if partner >= env.n:
        return
    try:
        await within(_tried(env, partner).wait(), env.params["barrier_ms"] / 1000)
    except TimeoutError:
        env.add("barrier_timeouts")


# --- the detector: an observer over every run --------------------------------------------


async def _observe(env: Env) -> None:
    """Snapshot holders and waiters (no await in between), look for cycles, keep what it saw."""
    st = _st(env)
    while not st.stop.is_set() and st.ended < env.n:
        at_ms = round(env.now_ms(), 1)
        holds = {r: (_name(w), token) for r, (w, token) in st.holders.items()}
        waits = {_name(w): r for w, r in st.waiting.items() if r in st.holders}
        graph = WaitForGraph()
        for waiter, resource in waits.items():
            graph.record_waiting(waiter, holds[resource][0])
        st.snapshots += 1
        held = {r: {"by": h} for r, (h, _) in holds.items()}
        snapshot = {"t_ms": at_ms, "held": held, "waiting": waits}
        if len(waits) > len(st.busiest.get("waiting", {})):
            st.busiest = snapshot
        new = [c for c in graph.cycles() if tuple(c) not in st.cycles]
        if new:
            await _confirm(env, snapshot, holds, new)
        await asyncio.sleep(env.params["observe_ms"] / 1000)


async def _confirm(
    env: Env, snapshot: dict[str, Any], holds: dict[str, tuple[str, str]], new: list[list[str]]
) -> None:
    """Keep the new cycles, with Redis's view of every held lock: whose token, what PTTL."""
    st = _st(env)
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


async def invariant(env: Env) -> list[Check]:
    """Money moved once per committed transfer; no account in two transfers at once."""
    st = _st(env)
    st.stop.set()
    if st.observer is not None:
        await within(st.observer, 10)
    ids = range(env.n + env.n % 2)
    pipe = env.redis.pipeline(transaction=False)
    for resource in [*(f"account:{a}" for a in ids), COARSE]:
        pipe.pttl(env.key(f"lock:{resource}"))
    left = await pipe.execute()
    env.extra_evidence.update(
        wait_for_cycles=list(st.cycles.values()),
        wait_for_graph=st.graph or st.busiest,
        detector={"snapshots": st.snapshots, "every_ms": env.params["observe_ms"]},
        locks_left_pttl_ms=[int(p) for p in left if int(p) > 0],  # leases of killed workers
    )
    if st.violations:
        env.extra_evidence["hierarchy_violations"] = st.violations
    values = await env.redis.mget([_balance(env, a) for a in ids])
    wrong = [
        f"account:{a} is {_int(v)}, expected {INITIAL_BALANCE + st.moved[a]}"
        for a, v in zip(ids, values, strict=True)
        if _int(v) != INITIAL_BALANCE + st.moved[a]
    ]
    commits, overlaps = env.counters["committed"], env.counters["overlaps"]
    return [
        Check(
            "balances moved once per commit", not wrong, "; ".join(wrong) or f"{commits} commits"
        ),
        Check("one transfer per account at a time", overlaps == 0, f"{overlaps} overlaps"),
    ]


# --- claims ------------------------------------------------------------------------------


def _pairs(rec: Record) -> int:
    return int(rec["knobs"]["n"]) // 2


def _out(rec: Record) -> dict[str, int]:
    return dict(rec.get("outcomes", {}))


def _cycles(rec: Record) -> list[dict[str, Any]]:
    return list(rec.get("evidence", {}).get("wait_for_cycles", []))


def _line(rec: Record) -> str:
    return f"{rec['variant']}: {notation(_out(rec))} in {rec.get('wall_ms', 0):.0f} ms"


def _freeze(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    rec = records["buggy"]
    if not _pairs(rec):
        return None  # one worker alone: no pair, nothing to collide
    n, frozen = rec["knobs"]["n"], 2 * _pairs(rec)
    left = rec["evidence"].get("locks_left_pttl_ms", [])
    seen = (
        f"{_line(rec)}; {rec.get('counters', {}).get('set_nx', 0)} SET NX polls; after the "
        f"hard limit {len(left)} locks still held, PTTL {min(left, default=0) / 1000:.0f} s"
    )
    want = {k: v for k, v in {"timeout": frozen, "ok": n - frozen}.items() if v}
    return _out(rec) == want and len(left) == frozen, seen


def _one_cycle_per_pair(rec: Record) -> bool:
    """The detector found exactly the cycles of the pairs that lock in opposite order."""
    found = {frozenset(c["members"]) for c in _cycles(rec)}
    return found == {frozenset((_name(2 * k), _name(2 * k + 1))) for k in range(_pairs(rec))}


def _cycles_named(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    rec = records["buggy"]
    if not _pairs(rec):
        return None  # one worker alone: no pair, nothing to collide
    found = {frozenset(c["members"]) for c in _cycles(rec)}
    agree = all(c["redis_agrees"] for c in _cycles(rec))
    first = _cycles(rec)[0]["waits"] if _cycles(rec) else []
    seen = f"buggy: {len(found)} cycles of {_pairs(rec)} pairs, Redis agrees: {agree}; e.g. {first}"
    return _one_cycle_per_pair(rec) and agree, seen


def _no_false_cycle(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    det = rec["evidence"].get("detector", {})
    waits = rec["evidence"].get("wait_for_graph", {}).get("waiting", {})
    first = next(iter(waits.items()), None)
    e_g = f" (e.g. {first[0]} waits for {first[1]})" if first else ""
    seen = f"fixed: {len(_cycles(rec))} cycles in {det.get('snapshots')} snapshots; {len(waits)} waits{e_g}"
    return not _cycles(rec) and det.get("snapshots", 0) > 0, seen


def _ordered(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    seen = f"{_line(rec)}; detector cycles: {len(_cycles(rec))}"
    return _out(rec) == {"ok": rec["knobs"]["n"]} and not _cycles(rec), seen


def _timeout_is_a_net(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    rec = records["timeout-only"]
    if not _pairs(rec):
        return None  # one worker alone: no pair, nothing to collide
    wait_ms = rec["params"]["lock_timeout_ms"]
    failed = _out(rec).get("lock_timeout", 0)
    first = rec.get("latency_ms_by_outcome", {}).get("lock_timeout", {}).get("min", 0)
    seen = (
        f"{_line(rec)}; first lock_timeout after {first:.0f} ms (lock_timeout {wait_ms:.0f} ms); "
        f"detector saw {len(_cycles(rec))} cycles of {_pairs(rec)} pairs"
    )
    nets = failed >= _pairs(rec) and _out(rec).get("timeout", 0) == 0 and first >= wait_ms
    return nets and _one_cycle_per_pair(rec), seen


def _trylock(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    rec = records["fixed-trylock"]
    if not _pairs(rec):
        return None  # one worker alone: no pair, nothing to collide
    n = rec["knobs"]["n"]
    attempts = rec.get("counters", {}).get("attempts", 0)
    most = rec.get("samples", {}).get("attempts_per_transfer", {}).get("max")
    seen = f"{_line(rec)}; attempts={attempts} (max {most} per transfer)"
    return _out(rec) == {"ok": n} and attempts >= n + _pairs(rec), seen


def _coarse(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed-coarse"]
    n, crit = rec["knobs"]["n"], rec["params"]["critical_ms"]
    most = rec.get("counters", {}).get("max_concurrent_transfers", 0)
    seen = f"{_line(rec)} (n x critical_ms = {n * crit:.0f} ms); {most} transfer(s) at once"
    return _out(rec) == {"ok": n} and most == 1 and rec["wall_ms"] >= n * crit, seen


def _ordered_keeps_parallelism(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    c, f = records["fixed-coarse"], records["fixed"]
    if _pairs(f) < 2:
        return None
    most = f.get("counters", {}).get("max_concurrent_transfers", 0)
    seen = f"{_line(f)}, {most} transfers at once; {_line(c)}"
    return most > 1, seen


def _hierarchy(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    rec = records["hierarchy-check"]
    if not _pairs(rec):
        return None  # one worker alone: no pair, nothing to collide
    n, pairs = rec["knobs"]["n"], _pairs(rec)
    found = rec["evidence"].get("hierarchy_violations", [])
    seen = f"{_line(rec)}; e.g. {found[0] if found else 'none'}"
    want = {"ok": n - pairs, "hierarchy_violation": pairs}
    return _out(rec) == {k: v for k, v in want.items() if v} and len(found) == pairs, seen


PUBLISHED = {
    "buggy": "死锁会导致永久冻结——没有崩溃，没有错误，只有沉默。",
    "fixed": "最实用的方法：通过保持顺序一致来打破循环等待。",
    "timeout-only": "超时是安全网，不是解决方案。",
    "fixed-trylock": "3. Try-Lock 并退避（打破占有并等待条件）",
    "fixed-coarse": "Trade-off: Less parallelism, but no deadlock risk",
    "hierarchy-check": "Cannot acquire ${level} while holding ${heldLevel}",
}
CLAIMS = (
    Claim(
        "DP-1",
        "Inconsistent order with Redis locks: every paired worker freezes until the hard limit "
        "kills it, no error, no crash; its locks are still held after (the lease runs on)",
        ("buggy",),
        _freeze,
        published=f"{PUBLISHED['buggy']} 锁顺序不一致，必然最终导致死锁。",
    ),
    Claim(
        "DP-2",
        "Sorted ids: every transfer completes and the detector sees no cycle",
        ("fixed",),
        _ordered,
        published=PUBLISHED["fixed"],
    ),
    invariants_hold(
        "DP-2", "fixed", "fixed: money moved once per commit, one transfer per account"
    ),
    Claim(
        "DP-3",
        "A lock timeout turns the freeze into lock_timeout errors (at least one per pair, none "
        "before the timeout): the cycle still forms",
        ("timeout-only",),
        _timeout_is_a_net,
        published=f"{PUBLISHED['timeout-only']} 超时只能缓解症状，死锁依然会发生。",
    ),
    Claim(
        "DP-4",
        "Try-lock, release all, jittered backoff: every transfer completes, after each pair's "
        "forced collision was retried",
        ("fixed-trylock",),
        _trylock,
        published=PUBLISHED["fixed-trylock"],
    ),
    invariants_hold(
        "DP-4", "fixed-trylock", "fixed-trylock: releasing and retrying keeps the locks exclusive"
    ),
    Claim(
        "DP-5",
        "One coarse lock: every transfer completes, one at a time; wall >= n x critical_ms",
        ("fixed-coarse",),
        _coarse,
        published=PUBLISHED["fixed-coarse"],
    ),
    Claim(
        "DP-5",
        "Sorted per-account locks keep transfers of different accounts in parallel",
        ("fixed-coarse", "fixed"),
        _ordered_keeps_parallelism,
        published="有序加锁能实现并行处理，死锁则会扼杀并行处理。",
    ),
    Claim(
        "DP-6",
        "The hierarchy check rejects the reversed path (level (ACCOUNT, 2k) while holding "
        "(ACCOUNT, 2k+1)); the ordered path completes",
        ("hierarchy-check",),
        _hierarchy,
        published=PUBLISHED["hierarchy-check"],
    ),
    Claim(
        "DP-7",
        "The wait-for graph finds every pair's cycle and names its two workers; Redis holds "
        "the locks it names",
        ("buggy",),
        _cycles_named,
        published="// Runtime deadlock detection; 已设置死锁检测／监控",
    ),
    Claim(
        "DP-7",
        "The detector reports no cycle where there is none (sorted order: waits, no cycle)",
        ("fixed",),
        _no_false_cycle,
    ),
)

SCENARIO = Scenario(
    id="lock-order-prevention",
    validate=validate,
    doc=__doc__ or "",
    kind="actors",
    variants={
        "buggy": buggy,
        "fixed": fixed,
        "timeout-only": timeout_only,
        "fixed-trylock": fixed_trylock,
        "fixed-coarse": fixed_coarse,
        "hierarchy-check": hierarchy_check,
    },
    outcomes=("ok", "lock_timeout", "gave_up", "hierarchy_violation"),
    claims=CLAIMS,
    published=PUBLISHED,
    setup=setup,
    invariant=invariant,
    defaults=Defaults(
        n=N_WORKERS, arrival="burst", actor_timeout_s=ACTOR_TIMEOUT_S, run_timeout_s=60
    ),
    params={
        "critical_ms": CRITICAL_MS,
        "poll_ms": POLL_MS,
        "lock_ttl_ms": LOCK_TTL_MS,
        "lock_timeout_ms": LOCK_TIMEOUT_MS,
        "barrier_ms": BARRIER_MS,
        "max_tries": MAX_TRIES,
        "observe_ms": OBSERVE_MS,
    },
    param_help={
        "critical_ms": "the transfer's work while holding its locks",
        "poll_ms": "waiting for a lock: one SET NX every poll_ms x U(1,2)",
        "lock_ttl_ms": "the locks' lease (PX); longer than the hard limit keeps the freeze",
        "lock_timeout_ms": "timeout-only: how long each lock is polled before lock_timeout",
        "barrier_ms": "the forced interleaving: how long a worker waits for its partner",
        "max_tries": "fixed-trylock: attempts before gave_up",
        "observe_ms": "the detector's snapshot interval",
    },
    uses=frozenset({"redis"}),
    sources=("DP",),
)
