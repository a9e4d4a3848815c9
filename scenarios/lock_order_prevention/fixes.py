"""lock-order-prevention, the fixes, judged on load records: DP-2, sorted ids complete every
transfer and the detector sees no cycle; DP-4, try-lock with release and backoff completes
every transfer after each pair's collision was retried; DP-5, one coarse lock completes
them one at a time, where sorted per-account locks keep transfers in parallel; DP-6, the
hierarchy check rejects the reversed path and the ordered one completes.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Record
from scenarios.lock_order_prevention.reading import _cycles, _line, _out, _pairs


def _ordered(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    seen = f"{_line(rec)}; detector cycles: {len(_cycles(rec))}"
    return _out(rec) == {"ok": rec["knobs"]["n"]} and not _cycles(rec), seen


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
    """Against the coarse lock on the same transfers: more of them at once, and the batch
    done in less time (the coarse lock's wall is at least n x critical_ms)."""
    c, f = records["fixed-coarse"], records["fixed"]
    if _pairs(f) < 2:
        return None
    most = f.get("counters", {}).get("max_concurrent_transfers", 0)
    coarse_most = c.get("counters", {}).get("max_concurrent_transfers", 0)
    seen = (
        f"{_line(f)}, {most} transfers at once; {_line(c)}, {coarse_most} at once; "
        f"x{f['wall_ms'] / max(c['wall_ms'], 1):.2f} of the coarse lock's wall"
    )
    return most > max(1, coarse_most) and f["wall_ms"] < c["wall_ms"], seen


def _hierarchy(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    rec = records["hierarchy-check"]
    if not _pairs(rec):
        return None  # one worker alone: no pair, nothing to collide
    n, pairs = rec["knobs"]["n"], _pairs(rec)
    found = rec["evidence"].get("hierarchy_violations", [])
    seen = f"{_line(rec)}; e.g. {found[0] if found else 'none'}"
    want = {"ok": n - pairs, "hierarchy_violation": pairs}
    return _out(rec) == {k: v for k, v in want.items() if v} and len(found) == pairs, seen
