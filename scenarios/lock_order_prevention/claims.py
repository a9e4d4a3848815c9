"""lock-order-prevention: what the document claims, how each claim is judged, the assembly.

The load claims (every paired worker freezes silently; sorted ids, try-lock and one coarse
lock complete; a timeout only turns the freeze into errors; the hierarchy check rejects
the reversed path; the detector names every cycle and no false one) are judged on
`locklab run` records of 10 workers released in a burst. The same transfers, two opposite
ones pinned, are judged on every interleaving (`locklab explore lock-order-prevention`):
buggy freezes in some, sorted ids, try-lock and the coarse lock keep every invariant in
all, and the schedule both-first shows the cycle, the timeout and the hierarchy check.
The load checks are in cycles.py (DP-1, DP-3, DP-7) and fixes.py (DP-2, DP-4..DP-6),
the invariant in invariant.py.

Published: no numbers; the document's sentences, verbatim (deadlock-prevention.zh.txt):
死锁会导致永久冻结——没有崩溃，没有错误，只有沉默。 锁顺序不一致，必然最终导致死锁。
最实用的方法：通过保持顺序一致来打破循环等待。 超时是安全网，不是解决方案。
超时只能缓解症状，死锁依然会发生。 3. Try-Lock 并退避（打破占有并等待条件）
Trade-off: Less parallelism, but no deadlock risk  有序加锁能实现并行处理，死锁则会扼杀并行处理。
Cannot acquire ${level} while holding ${heldLevel}  已设置死锁检测／监控
"""

from __future__ import annotations

from lab.core.claims import Claim, invariants_hold
from lab.core.scenario import Defaults, Param, declare
from lab.pinned import broke_in_some, canonical, kept_in_all
from scenarios.lock_order_prevention import cycles, fixes
from scenarios.lock_order_prevention import lock_order_prevention as code
from scenarios.lock_order_prevention.detector import DETECTOR
from scenarios.lock_order_prevention.invariant import invariant

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
        cycles._freeze,
        published=f"{PUBLISHED['buggy']} 锁顺序不一致，必然最终导致死锁。",
    ),
    Claim(
        "DP-2",
        "Sorted ids: every transfer completes and the detector sees no cycle",
        ("fixed",),
        fixes._ordered,
        published=PUBLISHED["fixed"],
    ),
    invariants_hold(
        "DP-2",
        "fixed",
        "fixed: money moved once per commit, one transfer per account",
        counterfactual=None,  # buggy's frozen transfers break it
    ),
    Claim(
        "DP-3",
        "A lock timeout turns the freeze into lock_timeout errors (at least one per pair, none "
        "before the timeout): the cycle still forms",
        ("timeout-only",),
        cycles._timeout_is_a_net,
        published=f"{PUBLISHED['timeout-only']} 超时只能缓解症状，死锁依然会发生。",
        counterfactual={"timeout-only": "buggy"},  # no timeout: the cycle freezes, no error
    ),
    Claim(
        "DP-4",
        "Try-lock, release all, jittered backoff: every transfer completes, after each pair's "
        "forced collision was retried",
        ("fixed-trylock",),
        fixes._trylock,
        published=PUBLISHED["fixed-trylock"],
    ),
    invariants_hold(
        "DP-4",
        "fixed-trylock",
        "fixed-trylock: releasing and retrying keeps the locks exclusive",
        counterfactual=None,  # buggy's frozen transfers break it
    ),
    Claim(
        "DP-5",
        "One coarse lock: every transfer completes, one at a time; wall >= n x critical_ms",
        ("fixed-coarse",),
        fixes._coarse,
        published=PUBLISHED["fixed-coarse"],
    ),
    Claim(
        "DP-5",
        "Sorted per-account locks keep transfers of different accounts in parallel: more at "
        "once than the coarse lock, the batch done sooner",
        ("fixed-coarse", "fixed"),
        fixes._ordered_keeps_parallelism,
        published="有序加锁能实现并行处理，死锁则会扼杀并行处理。",
        counterfactual={"fixed-coarse": "fixed", "fixed": "fixed-coarse"},  # sides swapped
    ),
    Claim(
        "DP-6",
        "The hierarchy check rejects the reversed path (level (ACCOUNT, 2k) while holding "
        "(ACCOUNT, 2k+1)); the ordered path completes",
        ("hierarchy-check",),
        fixes._hierarchy,
        published=PUBLISHED["hierarchy-check"],
        counterfactual={"hierarchy-check": "buggy"},  # no check: the reversed path is taken
    ),
    Claim(
        "DP-7",
        "The wait-for graph finds every pair's cycle and names its two workers; Redis holds "
        "the locks it names",
        ("buggy",),
        cycles._cycles_named,
        published="// Runtime deadlock detection; 已设置死锁检测／监控",
    ),
    Claim(
        "DP-7",
        "The detector reports no cycle where there is none (sorted order: waits, no cycle)",
        ("fixed",),
        cycles._no_false_cycle,
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
        counterfactual=None,  # buggy's interleavings freeze
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
        counterfactual={"timeout-only": "buggy"},  # no timeout: the same schedule freezes
    ),
    kept_in_all(
        "DP-4",
        "fixed-trylock",
        "Try-lock, release all, back off: no interleaving of two opposite transfers freezes",
        published=PUBLISHED["fixed-trylock"],
        counterfactual=None,  # buggy's interleavings freeze
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
        counterfactual=None,  # buggy's interleavings freeze
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
        counterfactual={"hierarchy-check": "buggy"},  # no check: the reversed path deadlocks
    ),
)

SCENARIO = declare(
    code,
    outcomes=("ok", "lock_timeout", "gave_up", "hierarchy_violation", "timeout"),
    claims=(*CLAIMS, *EXPLORED),
    published=PUBLISHED,
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
