"""lock-order-prevention, the cycle of a pair that locks in opposite order, judged on load
records: DP-1, every paired worker freezes silently until the hard limit and its locks stay
held; DP-3, a lock timeout only turns the freeze into lock_timeout errors, the cycle still
forms; DP-7, the detector names every pair's cycle (Redis holds the locks it names) and
reports no cycle where there is none.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Record
from scenarios.lock_order_prevention.detector import name
from scenarios.lock_order_prevention.reading import _cycles, _line, _out, _pairs


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
