"""lease-gc-pause DL-13, the TTL: a pause longer than the TTL overlaps whatever the TTL (a
shorter one does not), and a killed holder blocks the lock for its whole TTL. Judged under
every TTL case (the published one, ttl-1000, ttl-above-pause); the first's counterfactual is
a record edit (ttl._overlap_flipped), the second's a run of the code mutant mutant-reaped.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import NotJudged, Record
from scenarios.lease_gc_pause.reading import _both, _during, _lease, _span, event


def _pause_over_ttl(records: Mapping[str, Record]) -> tuple[bool, str]:
    """pause > TTL: A's lease runs out while A believes, and B overlaps; else neither."""
    rec = records["fixed"]
    ttl, pause = rec["params"]["ttl_ms"], rec["params"]["pause_ms"]
    lease = _span(rec, "A", "redis")
    belief = _span(rec, "A", "belief")
    ab = _both(rec, "A", "B")
    outlived = lease.get("ended") == "expired" and lease["end_ms"] < belief.get("end_ms", 0)
    held = (outlived and ab is not None) if pause > ttl else (not outlived and ab is None)
    both = f"A and B both believed: {_during(ab)}"
    return held, f"fixed: TTL {ttl} ms, pause {pause} ms: {_lease(rec, 'A')}; {both}"


def _overlap_flipped(rec: Record) -> None:
    """The overlap the pause against the TTL would not decide: over the TTL, B never gets
    the lock; under it, B gets it at its time while A is still paused."""
    p, spans = rec["params"], rec["evidence"]["timeline"]["spans"]
    if p["pause_ms"] > p["ttl_ms"]:
        spans[:] = [s for s in spans if (s["who"], s["kind"]) != ("B", "belief")]
        return
    end = _span(rec, "A", "belief")["end_ms"] + p["b_work_ms"]
    b = {"start_ms": p["b_at_ms"], "end_ms": end, "label": "mutated: B got in while A slept"}
    spans.insert(0, {"who": "B", "kind": "belief", **b})


def _killed_blocks(records: Mapping[str, Record]) -> tuple[bool, str]:
    """The dead holder's lease lasts its whole TTL from SET: whoever tries meanwhile is refused."""
    rec = records["holder-killed"]
    ttl = rec["params"]["ttl_ms"]
    got = event(rec, "A", "got lock")
    killed = event(rec, "A", "killed")
    lease = _span(rec, "A", "redis")
    if not (got and killed and lease):  # the run did not make the dead holder
        raise NotJudged("holder-killed: A was not killed after taking the lock")
    tries = [e for e in rec["trace"] if e["who"] != "A" and e["event"] in ("got lock", "lock busy")]
    end = lease["end_ms"]
    lasted, dead = end - got["t_ms"], end - killed["t_ms"]
    held = (
        lease["ended"] == "expired"
        and abs(lasted - ttl) <= max(20, ttl / 10)
        and dead > 0
        and all(e["event"] == "lock busy" for e in tries if e["t_ms"] < end)
    )
    who = "; ".join(f"{e['who']} {e['event']} at {e['t_ms']:.0f} ms" for e in tries)
    return held, (
        f"holder-killed: A got the lock at {got['t_ms']:.0f} ms, was killed at "
        f"{killed['t_ms']:.0f} ms; {_lease(rec, 'A')}, {lasted:.0f} ms after SET (TTL {ttl} ms), "
        f"{dead:.0f} ms of it for a dead worker; {who}"
    )
