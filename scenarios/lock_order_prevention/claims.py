"""lock-order-prevention: what the document claims, how each claim is judged, the assembly.

The load claims (every paired worker freezes silently; sorted ids, try-lock and one coarse
lock complete; a timeout only turns the freeze into errors; the hierarchy check rejects
the reversed path; the detector names every cycle and no false one) are judged on
`locklab run` records of 10 workers released in a burst. The same transfers, two opposite
ones pinned, are judged on every interleaving (`locklab explore lock-order-prevention`):
buggy freezes in some, sorted ids, try-lock and the coarse lock keep every invariant in
all, and the schedule both-first shows the cycle, the timeout and the hierarchy check.

Published: no numbers; the document's sentences, verbatim (deadlock-prevention.zh.txt):
死锁会导致永久冻结——没有崩溃，没有错误，只有沉默。 锁顺序不一致，必然最终导致死锁。
最实用的方法：通过保持顺序一致来打破循环等待。 超时是安全网，不是解决方案。
超时只能缓解症状，死锁依然会发生。 3. Try-Lock 并退避（打破占有并等待条件）
Trade-off: Less parallelism, but no deadlock risk  有序加锁能实现并行处理，死锁则会扼杀并行处理。
Cannot acquire ${level} while holding ${heldLevel}  已设置死锁检测／监控
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.core.claims import Claim, Record, invariants_hold
from lab.core.outcome import notation
from lab.core.scenario import Check, Defaults, Env, Param, Scenario
from lab.pinned import broke_in_some, canonical, kept_in_all
from scenarios.lock_order_prevention import lock_order_prevention as code
from scenarios.lock_order_prevention.detector import DETECTOR, name, state

N_WORKERS = 10  # 5 pairs of accounts
ACTOR_TIMEOUT_S = 2.0  # the harness's hard limit: what ends the freeze of a load
PARAMS = {
    "critical_ms": Param(50.0, "the transfer's work while holding its locks", min=0),
    "poll_ms": Param(5.0, "waiting for a lock: one SET NX every poll_ms", min=0),
    # a lease far longer than any run here: the freeze does not end
    "lock_ttl_ms": Param(
        30_000, "the locks' lease (PX); longer than the hard limit keeps the freeze", min=1
    ),
    # timeout-only (the document: acquireWithTimeout(..., 5000))
    "lock_timeout_ms": Param(
        300.0, "timeout-only: how long each lock is polled before lock_timeout", min=0
    ),
    # a wait without timeout; a load's hard limit (2 s) comes first
    "watch_ms": Param(
        60_000.0,
        "a wait without timeout is stopped after it (pinned runs: 200 ms; a load's"
        " --actor-timeout comes first)",
        above=0,
    ),
    # acquireMultipleLocks(resources, maxRetries = 10)
    "max_tries": Param(10, "fixed-trylock: attempts before gave_up", min=1),
    "observe_ms": Param(10.0, "the detector's snapshot interval", above=0),
}


async def invariant(env: Env) -> list[Check]:
    """Money moved once per committed transfer; no account in two transfers at once; no
    transfer frozen (stopped by the lab's hard limit while it waited)."""
    ids, moved = [f"account:{a}" for a in range(env.n + env.n % 2)], state(env).moved
    values = [int(v or -1) for v in await env.redis.mget([code.balance(env, a) for a in ids])]
    wrong = [
        f"{a} is {v}, expected {code.INITIAL_BALANCE + moved[a]}"
        for a, v in zip(ids, values, strict=True)
        if v != code.INITIAL_BALANCE + moved[a]
    ]
    commits, overlaps = env.counters["committed"], env.counters["overlaps"]
    stopped = env.outcomes.get("timeout", 0)
    detail = "; ".join(wrong) or f"{commits} commits"
    return [
        Check("balances moved once per commit", not wrong, detail),
        Check("one transfer per account at a time", overlaps == 0, f"{overlaps} overlaps"),
        Check("no transfer frozen", stopped == 0, f"{stopped} stopped by the lab's hard limit"),
    ]


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
    return found == {frozenset((name(2 * k), name(2 * k + 1))) for k in range(_pairs(rec))}


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
    seen = (
        f"fixed: {len(_cycles(rec))} cycles in {det.get('snapshots')} snapshots; {len(waits)} "
        f"waits{e_g}"
    )
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


PAIRED = ("s1 lock-1", "s2 lock-0")  # both-first: each holds one lock and waits for the other
EXPLORED = (
    broke_in_some(
        "DP-1",
        "buggy",
        "Two opposite transfers, every interleaving: in some both hold one lock and poll for "
        "the other until the lab stops them (the invariant 'no transfer frozen' breaks)",
        published=PUBLISHED["buggy"],
    ),
    canonical(
        "DP-1",
        "buggy",
        "both-first",
        "Schedule both-first: each waits for the lock the other holds; both are stopped by "
        "the hard limit, no error of their own",
        outcomes={"s1": "timeout", "s2": "timeout"},
        waited=PAIRED,
        kept=False,
    ),
    kept_in_all(
        "DP-2",
        "fixed",
        "Sorted ids: no interleaving of two opposite transfers freezes or moves money wrong",
        published=PUBLISHED["fixed"],
    ),
    canonical(
        "DP-3",
        "timeout-only",
        "both-first",
        "Schedule both-first with a lock timeout: the cycle forms, the timeout fails one "
        "transfer (lock_timeout) and frees the other",
        outcomes={"s1": "lock_timeout", "s2": "ok"},
        kept=True,
        published=PUBLISHED["timeout-only"],
    ),
    kept_in_all(
        "DP-4",
        "fixed-trylock",
        "Try-lock, release all, back off: no interleaving of two opposite transfers freezes",
        published=PUBLISHED["fixed-trylock"],
    ),
    canonical(
        "DP-4",
        "fixed-trylock",
        "both-first",
        "Schedule both-first with try-lock: s1 finds its second lock busy, releases and "
        "retries after s2 completed; both complete",
        outcomes={"s1": "ok", "s2": "ok"},
        kept=True,
    ),
    kept_in_all(
        "DP-5",
        "fixed-coarse",
        "One coarse lock: no interleaving of two transfers freezes",
        published=PUBLISHED["fixed-coarse"],
    ),
    canonical(
        "DP-6",
        "hierarchy-check",
        "both-first",
        "Schedule both-first under the hierarchy check: s2's reversed path is rejected "
        "before Redis is asked, s1 then completes",
        outcomes={"s1": "ok", "s2": "hierarchy_violation"},
        waited=("s1 lock-1",),
        kept=True,
        published=PUBLISHED["hierarchy-check"],
    ),
)

SCENARIO = Scenario(
    id="lock-order-prevention",
    doc=code.__doc__ or "",
    kind="actors",
    variants=code.PINNED.actors(),
    pinned=code.PINNED,
    outcomes=("ok", "lock_timeout", "gave_up", "hierarchy_violation", "timeout"),
    claims=(*CLAIMS, *EXPLORED),
    published=PUBLISHED,
    setup=code.setup,
    invariant=invariant,
    observers=(DETECTOR,),
    defaults=Defaults(
        n=N_WORKERS, arrival="burst", actor_timeout_s=ACTOR_TIMEOUT_S, run_timeout_s=60
    ),
    params=PARAMS,
    # pinned runs need PostgreSQL (the sequencer's sessions); the transfers use Redis only
    uses=frozenset({"pg", "redis"}),
    sources=("DP",),
)
