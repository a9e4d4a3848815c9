"""lease-gc-pause: how a claim reads one recorded run of the timed story. The trace says
what each holder did and when (its first `got lock`, `release`, `write`, ...); the
timeline says when each believed it held the lock and when Redis held its token. The
phrases below (a lease's end, a release's result, the writes and the final row) are what
the verdicts of story.py, fence.py and ttl.py quote.
"""

from __future__ import annotations

from typing import Any

from lab.core.claims import Record


def event(rec: Record, who: str, name: str) -> dict[str, Any]:
    """`who`'s first `name` event in the trace ({} when it never happened)."""
    return next((e for e in rec["trace"] if e["who"] == who and e["event"] == name), {})


def fence_rejected_a(rec: Record) -> bool:
    """B's write landed (1 row), A's later stale write changed 0 rows, the row is B's: what
    the storage's fence does (lease-gc-pause, redlock, lease-busy-loop)."""
    aw, bw = event(rec, "A", "write"), event(rec, "B", "write")
    row = rec["evidence"].get("final_row") or {}
    return (
        bool(aw and bw)
        and (bw["rows"], aw["rows"]) == (1, 0)
        and bw["t_ms"] < aw["t_ms"]
        and row.get("body") == "from B"
    )


def _span(rec: Record, who: str, kind: str) -> dict[str, Any]:
    """`who`'s first span of `kind` ("belief" or "redis") in the timeline ({} when none)."""
    spans = rec["evidence"].get("timeline", {}).get("spans", [])
    return next((s for s in spans if s["who"] == who and s["kind"] == kind), {})


def _both(rec: Record, x: str, y: str) -> tuple[float, float] | None:
    """When x and y both believed they held the lock (None if never)."""
    sx, sy = _span(rec, x, "belief"), _span(rec, y, "belief")
    lo, hi = (
        max(sx.get("start_ms", 0), sy.get("start_ms", 0)),
        min(sx.get("end_ms", 0), sy.get("end_ms", 0)),
    )
    return (lo, hi) if sx and sy and hi > lo else None


def _during(span: tuple[float, float] | None) -> str:
    if span is None:
        return "never"
    return f"{span[1] - span[0]:.0f} ms ({span[0]:.0f}–{span[1]:.0f} ms)"


def _lease(rec: Record, who: str) -> str:
    s = _span(rec, who, "redis")
    return f"{who}'s token {s['ended']} at {s['end_ms']:.0f} ms" if s else f"{who} never held it"


def _release(rec: Record, who: str) -> str:
    e = event(rec, who, "release")
    return (
        f"{who} release -> {e['result']} ({e['how']}) at {e['t_ms']:.0f} ms"
        if e
        else f"{who} never released"
    )


def writes(rec: Record) -> str:
    row = rec["evidence"].get("final_row") or {}
    lines = [
        f"{e['who']} (fence={e['fence']}) writes -> {e['rows']}"
        for e in rec["trace"]
        if e["event"] == "write"
    ]
    return "; ".join(
        [
            *lines,
            f"row {{id: {row.get('id')}, body: {row.get('body')!r}, fence: {row.get('fence')}}}",
        ]
    )
