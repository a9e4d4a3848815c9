"""redis-failover: what the document claims, how each claim is judged, and the assembly.

Every claim is judged on one run per variant of the same failover: the holders SET NX
granted, the fences A and B got, the invoice row's final writer, and what the Sentinels
announced (`evidence.failover`). The partition is made by the lab's link proxy dropping
what passes, not by freezing the replica: with SIGSTOP the SET is not lost, the primary's
stream already sits in the replica's socket buffer and is applied on SIGCONT; and not by
pointing the replica elsewhere, which a Sentinel notices and repairs.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Claim, Record, invariant_broken, invariants_hold, mutation
from lab.core.scenario import Defaults, declare
from scenarios.redis_failover import redis_failover as code


def _two_holders_same_fence(records: Mapping[str, Record]) -> tuple[bool, str]:
    ev = records["buggy"]["evidence"]
    holders = [h for h in ev.get("holders", []) if h.get("granted")]  # SET NX said OK
    repeated = ev.get("fence_a") is not None and ev.get("fence_a") == ev.get("fence_b")
    return len(holders) == 2 and repeated, f"buggy: SET NX granted to {holders}"


SENTINEL_EVENTS = ("+sdown", "+odown", "+switch-master")


def _sentinels_promote_without_lock(records: Mapping[str, Record]) -> tuple[bool, str]:
    f = records["buggy"]["evidence"].get("failover") or {}
    seen = {e["event"]: e["t_ms"] for e in reversed(f.get("events", []))}  # first of each
    by_sentinels = f.get("by") == "sentinel" and all(e in seen for e in SENTINEL_EVENTS)
    promoted = f.get("new_primary") == f.get("replica") != f.get("old_primary")
    ok = by_sentinels and promoted and f.get("lock_on_new_primary") is None
    times = ", ".join(f"{e} at {seen.get(e)} ms" for e in SENTINEL_EVENTS)
    return ok, (
        f"buggy: {f.get('sentinels')} Sentinels ({times} after the primary died) promoted "
        f"{f.get('new_primary')} (the replica: {promoted}); the lock there: "
        f"{f.get('lock_on_new_primary')!r}"
    )


def _lock_reached_replica(rec: Record) -> None:
    """What a run whose replica had received A's SET before the failover would record."""
    rec["evidence"]["failover"]["lock_on_new_primary"] = "A's token"


def _storage_fence_orders(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    ev = rec["evidence"]
    ordered = (ev.get("fence_b") or 0) > (ev.get("fence_a") or 0)
    ok = ordered and rec["outcomes"] == {"wrote": 1, "stale_write_rejected": 1}
    return ok, f"fixed: fences A={ev.get('fence_a')} B={ev.get('fence_b')}, {rec['outcomes']}"


def _wait_refuses(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed-wait"]
    holders = [h for h in rec["evidence"].get("holders", []) if h.get("granted")]
    return rec["outcomes"] == {"wrote": 1, "lock_not_replicated": 1} and len(holders) == 1, (
        f"fixed-wait: {rec['outcomes']}, holders {holders}"
    )


PUBLISHED = "replica chưa nhận lệnh SET lock được promote; người khác lấy được lock ngay"
CLAIMS = (
    Claim(
        "DL-14",
        "The Sentinels, not the lab, promote the replica that never received A's SET: the "
        "lock is gone there",
        ("buggy",),
        _sentinels_promote_without_lock,
        published="replica chưa nhận lệnh SET lock được promote",
        counterfactual=mutation(
            "buggy",
            _lock_reached_replica,
            "the Sentinels promote the same replica in every variant",
        ),
    ),
    Claim(
        "DL-14",
        "After failover two workers hold the lock and INCR repeats A's fence",
        ("buggy",),
        _two_holders_same_fence,
        published=PUBLISHED,
    ),
    invariant_broken(
        "DL-14",
        "buggy",
        "invoice written by the current holder",
        "The rightful holder's write is rejected: the storage cannot order repeated fences",
        published="Fencing token (INCR) cũng có thể bị lùi nếu INCR chưa replicate",
    ),
    Claim(
        "DL-14",
        "A storage-generated fence keeps increasing across the failover: B writes, A's stale "
        "write is rejected",
        ("fixed",),
        _storage_fence_orders,
        published="fencing tốt nhất là số do storage sinh hoặc xác nhận",
    ),
    Claim(
        "DL-14",
        "WAIT 1 sees no replica acknowledge A's SET: A never proceeds, one holder",
        ("fixed-wait",),
        _wait_refuses,
    ),
    *(
        invariants_hold(
            "DL-14", v, f"{v}: the invoice is the current holder's", counterfactual={v: "buggy"}
        )
        for v in ("fixed", "fixed-wait")
    ),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed, "fixed-wait": code.fixed_wait},
    outcomes=(
        "wrote",
        "write_rejected",
        "stale_write_landed",
        "stale_write_rejected",
        "lock_not_replicated",
    ),
    claims=CLAIMS,
    published={"buggy": PUBLISHED},
    defaults=Defaults(n=2, run_timeout_s=60),
    uses=frozenset({"pg"}),
    sources=("DL",),
)
