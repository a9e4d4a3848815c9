"""cron-rerun DL-15, DL-16, DL-18, LC-3: what the lock stops (an overlapping pod-2) and what
it does not (the Job's rerun after the crash), what the business key makes of the rerun,
and the transaction the xact-lock job keeps open. Each judged on every trial."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.core.claims import Claim, Record, on_mutant
from scenarios.cron_rerun.cron_rerun import NO_LOCK
from scenarios.cron_rerun.trials import BEFORE_CRASH, of, trials_of


def lock_stops_concurrent(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        ts = trials_of(records[variant])
        inside = records[variant]["params"]["pod2_connect"] == "inside"
        during = [t for t in ts if t.pod2.arrived == BEFORE_CRASH]
        skipped = [t for t in during if t.pod2.result == "skipped"]
        if inside and not during:
            return None  # connecting inside the race, pod-2 never came in time: not exercised
        # Connected before the race, pod-2 always arrives in time: every trial must show it.
        held = bool(during) and len(skipped) == len(during) and (inside or len(during) == len(ts))
        return held, (
            f"{variant}: pod-2 tried while pod-1 held the lock in {of(len(during), ts)}"
            f" (pod2_connect={'inside' if inside else 'before'}) and skipped in {len(skipped)}"
        )

    claim = Claim(
        "DL-15",
        f"{variant}: pod-2 skips while pod-1 holds the advisory lock",
        (variant,),
        check,
        published="[ 'pod-1: billed 5', 'pod-2: skipped (lock held)' ]",
    )
    # every variant takes the same lock: the counterfactual is the job without it, run
    return on_mutant(claim, NO_LOCK)


def rerun_bills_again(records: Mapping[str, Record]) -> tuple[bool, str]:
    ts = trials_of(records["buggy"])
    more = [t for t in ts if t.invoices > t.customers]
    lines = records["buggy"]["evidence"].get("lines", [])
    return bool(ts) and len(more) == len(ts), (
        f"buggy: invoices > customers in {of(len(more), ts)}; trial 1: {'; '.join(lines)}"
    )


def unique_holds(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        ts = trials_of(records[variant])
        exact = [t for t in ts if t.invoices == t.customers and t.max_per_key == 1]
        lines = records[variant]["evidence"].get("lines", [])
        return bool(ts) and len(exact) == len(ts), (
            f"{variant}: exactly one invoice per (customer, period) in {of(len(exact), ts)};"
            f" trial 1: {'; '.join(lines)}"
        )

    return Claim(
        "DL-16",
        f"{variant}: UNIQUE keeps one invoice per customer and period, every trial",
        (variant,),
        check,
        published="retry billed 0; invoices with UNIQUE(customer_id, period): 5",
        unjudged=("the idempotency key bill:{customer}:{period} with the payment provider",),
    )


def rerun_walks_all(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        ts = trials_of(records[variant])
        ok = [
            t
            for t in ts
            if t.retry.conflicts == t.committed_before_retry
            and t.retry.inserted == t.customers - t.committed_before_retry
        ]
        walked = f"{variant}: the retry walked every customer in {of(len(ok), ts)}"
        if not ts:
            return False, walked
        first = ts[0]
        r = first.retry
        return len(ok) == len(ts), (
            f"{walked}; trial 1, crash at {first.crash_after}/{first.customers}: "
            f"{r.conflicts} no-op conflicts (p50 {r.conflict_p50_ms} ms) + {r.inserted} inserts "
            f"(p50 {r.insert_p50_ms} ms)"
        )

    return Claim(
        "DL-18",
        f"{variant}: a rerun walks all customers; those billed are no-op conflicts",
        (variant,),
        check,
        published="crash at 25,000/50,000: the first 25,000 are fast no-op conflicts",
        unjudged=(
            "the no-op conflicts are fast: their p50 is shown beside the inserts', not compared",
            "25,000 of 50,000 customers (here the profile's customers and crash_after)",
            "a checkpoint (last_customer_id) is only an optimisation: no variant keeps one",
        ),
    )


def _ms(x: Any) -> str:
    return "none" if x is None else f"{x:.1f} ms"


def xact_held_open(records: Mapping[str, Record]) -> tuple[bool, str]:
    ts = trials_of(records["fixed-xact-lock"])
    held = [
        t
        for t in ts
        if t.pod1_at_crash.get("state") == "idle in transaction"
        and (t.pod1_at_crash.get("xid") or t.pod1_at_crash.get("xmin"))
    ]
    s = ts[0].pod1_at_crash if ts else {}
    by = s.get("xid") or s.get("xmin")
    return bool(ts) and len(held) == len(ts), (
        f"fixed-xact-lock: pod-1 mid-job is '{s.get('state')}' in {of(len(held), ts)}; trial 1:"
        f" transaction open {_ms(s.get('xact_open_ms'))}, xid {s.get('xid')}, xmin"
        f" {s.get('xmin')}; a new snapshot's xmin is {s.get('horizon')}"
        + (" (held back by pod-1)" if by and by == s.get("horizon") else "")
    )


def session_lock_no_xact(records: Mapping[str, Record]) -> tuple[bool, str]:
    ts = trials_of(records["fixed"])
    idle = [
        t
        for t in ts
        if t.pod1_at_crash.get("state") == "idle" and t.pod1_at_crash.get("holds_lock")
    ]
    ids = [t for t in idle if not (t.pod1_at_crash.get("xid") or t.pod1_at_crash.get("xmin"))]
    s = ts[0].pod1_at_crash if ts else {}
    return bool(ts) and len(ids) == len(ts), (
        f"fixed: pod-1 mid-job holds the lock, 'idle' with no xid or xmin, in "
        f"{of(len(ids), ts)}; trial 1: '{s.get('state')}', lock held {s.get('holds_lock')},"
        f" xid {s.get('xid')}, xmin {s.get('xmin')}, transaction open {_ms(s.get('xact_open_ms'))}"
    )
