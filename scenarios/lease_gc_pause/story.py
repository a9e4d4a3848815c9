"""lease-gc-pause DL-10 and DL-12, the published story: who releases whose lock. Plain DEL
(and GET-then-DEL) lets A's late release delete B's lock so that C gets in while B still
holds; compare-and-delete makes A's release a no-op and C is refused. Judged on the timed
run (only when its timing is the published one, `published_timing`: A's lease expires
before B comes) and on the pinned canonical schedule's transcript.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lab.core.claims import Check as ClaimCheck
from lab.core.claims import Claim, Record
from scenarios.lease_gc_pause.reading import _both, _during, _lease, _release, _span, event


def _third_holder(variant: str) -> ClaimCheck:
    """A's release deletes B's lock; C acquires while B still believes it holds."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        c_got = event(rec, "C", "got lock")
        bc = _both(rec, "B", "C")
        get = event(rec, "A", "GET")
        held = (
            event(rec, "A", "release").get("result") == 1
            and _span(rec, "B", "redis").get("ended") == "deleted by A"
            and bool(c_got)
            and bc is not None
            # GET-then-DEL: A's GET saw its own token, and B took the lock before A's DEL
            and (
                not get
                or (get["mine"] and get["t_ms"] < event(rec, "B", "got lock").get("t_ms", 0))
            )
        )
        c = f"C got lock, fence={c_got['fence']}" if c_got else "C: lock busy"
        seen = (
            f"A's GET -> {'mine' if get['mine'] else 'not mine'} at {get['t_ms']:.0f} ms; "
            if get
            else ""
        )
        both = f"B and C both held: {_during(bc)}"
        return held, f"{variant}: {seen}{_release(rec, 'A')}; {_lease(rec, 'B')}; {c}; {both}"

    return check


def _c_busy(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    busy = bool(event(rec, "C", "lock busy"))
    held = (
        busy
        and event(rec, "A", "release").get("result") == 0
        and _span(rec, "B", "redis").get("ended") == "expired"
    )
    c = "C lock busy" if busy else "C got the lock"
    return held, f"fixed: {_release(rec, 'A')}; {c}; {_lease(rec, 'B')}"


def published_timing(claim: Claim) -> Claim:
    """The claim is about the published story, where A's lease expires before B comes: a
    run whose TTL outlasts A's pause (or B's arrival) does not exercise it (not judged)."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        p = next(iter(records.values()))["params"]
        if not p["pause_ms"] > p["ttl_ms"] <= p["b_at_ms"]:
            return None
        return claim.check(records)

    return replace(claim, check=check)


def _results(run: Mapping[str, Any]) -> dict[str, str]:
    """A pinned run's transcript as step -> result ("A release" -> "-> 1"), in its order."""
    lines = run["transcript"].splitlines()[1:]
    return {" ".join(ln.split()[:2]): ln.rsplit("  ", 1)[-1].strip() for ln in lines}


def _pinned_third_holder(run: Mapping[str, Any]) -> tuple[bool, str]:
    """Plain DEL, pinned: A's release deletes B's lock, C gets it, then B's release finds none."""
    r = _results(run)
    order = [k for k in r if k in ("A release", "C acquire", "B release")]
    held = (
        r.get("A release") == "-> 1"
        and r.get("C acquire", "").startswith("-> OK")
        and r.get("B release") == "-> 0"
        and order == ["A release", "C acquire", "B release"]
    )
    return held, "published: " + "; ".join(f"{k} {r.get(k)}" for k in order)


def _pinned_busy(run: Mapping[str, Any]) -> tuple[bool, str]:
    """Compare-and-delete, pinned: A's release is a no-op, C is refused, B's release is B's."""
    r = _results(run)
    keys = ("A write", "A release", "C acquire", "B release")
    held = (
        r.get("A write") == "-> UPDATE 0"
        and r.get("A release") == "-> 0"
        and r.get("C acquire") == "-> busy"
        and r.get("B release") == "-> 1"
    )
    return held, "published: " + "; ".join(f"{k} {r.get(k)}" for k in keys)
