"""job-queue LC-16 under a load, the dead worker's lease: a worker that dies right after its
first claim committed leaves its jobs 'running', and they are reclaimed once locked_until
passes, on PostgreSQL's clock (the case crash). Its counterfactual is a code mutant whose
claim ignores locked_until (mutant-no-lease): the jobs are taken before the lease ends.
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
    until = samples.get("orphaned_until_ms", {}).get("max")
    new = samples.get("reclaimed_until_ms", {}).get("min")
    after = None if new is None or until is None else new - p["lease_ms"] - until
    held = got == orphaned and after is not None and after >= 0  # samples keep 0.1 ms
    if until is None:
        # its claim had just set locked_until, which only DONE clears: by the time the dead
        # worker read it, others had taken and finished its jobs, within its lease
        when = "its lease's end unread: its jobs were done by others before it looked"
    elif after is None:
        when = "none"
    elif after < 0:
        when = f"the first {-after:.1f} ms BEFORE its lease ended"
    else:
        when = f"the first {after:.1f} ms after its lease ended"
    return held, (
        f"{rec['variant']}: {p['crash']} died holding {orphaned} jobs; {got} reclaimed, {when} "
        f"(lease {p['lease_ms']} ms; PostgreSQL's clock)"
    )
