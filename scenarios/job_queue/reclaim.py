"""job-queue LC-16 under a load, the dead worker's lease: a worker that dies right after its
first claim committed leaves its jobs 'running', and they are reclaimed once locked_until
passes, on PostgreSQL's clock (the case crash). Its counterfactual is a claim blind to
locked_until: nothing reclaimed.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Record


def _reclaimed(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    rec = records["fixed"]
    p = rec["params"]
    c = rec["counters"]
    samples = rec["samples"]
    orphaned = c.get("orphaned", 0)
    if not p["crash"] or not orphaned:
        return None  # nobody died holding jobs
    got = c.get("reclaimed", 0)
    # on PostgreSQL's clock: the dead worker's lease end, the first reclaim's now() (its
    # new lease's end less lease_ms)
    until = samples.get("orphaned_until_ms", {}).get("max", 0.0)
    new = samples.get("reclaimed_until_ms", {}).get("min")
    after = None if new is None else new - p["lease_ms"] - until
    held = got == orphaned and after is not None and after >= 0  # samples keep 0.1 ms
    when = "none" if after is None else f"the first {after:.1f} ms after its lease ended"
    return held, (
        f"fixed: {p['crash']} died holding {orphaned} jobs; {got} reclaimed, {when} "
        f"(lease {p['lease_ms']} ms; PostgreSQL's clock)"
    )


def _never_reclaimed(rec: Record) -> None:
    """As a claim that never looks at locked_until would report: nothing reclaimed."""
    rec["counters"]["reclaimed"] = 0
    rec["samples"].pop("reclaimed_until_ms", None)
