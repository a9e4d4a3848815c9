"""Claims on the published *seconds*: a wall time within a tolerance, or not reproduced.

Shapes hold on any machine; seconds need the documents' setting (a network between the
app and PostgreSQL, node-postgres' pool). A scenario that found such a setting by
measurement names it as a case and judges its wall times with `wall_within`: held within
the tolerance, else NOT REPRODUCED with the measured ratio (never "not held", so a run
that comes closer to the document can never fail, and a gap cannot silently vanish).
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Claim, NotReproduced, Record
from lab.core.outcome import notation


def setting(rec: Record) -> str:
    """The knobs that make the seconds: pool mode and the RTT the actors really paid."""
    knobs = rec["knobs"]
    net = rec.get("evidence", {}).get("network") or {}
    rtt = net.get("actors_rtt_ms", {}).get("median")
    paid = f"rtt {rtt} ms measured" if net.get("rtt_ms_asked") else "no added rtt"
    return f"{knobs['connect']}, {paid}"


def _line(variant: str, rec: Record) -> str:
    attempts = rec.get("counters", {}).get("attempts")
    extra = f" attempts={attempts}" if attempts else ""
    return f"{variant}: {notation(rec['outcomes'])}{extra} in {rec['wall_ms']:.0f} ms"


def wall_within(
    cid: str, variant: str, published_ms: float, tolerance: float, case: str, text: str
) -> Claim:
    """`variant`'s wall time is within ±`tolerance` (a fraction) of `published_ms`: held;
    outside it the published number is not reproduced (NotReproduced, with the ratio),
    never "not held": a run that comes closer to the document can only turn it held."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        ratio = rec["wall_ms"] / published_ms
        measured = f"{_line(variant, rec)} = x{ratio:.2f} of published"
        if abs(ratio - 1) > tolerance:
            raise NotReproduced(f"{measured}, outside ±{tolerance:.0%} ({setting(rec)})")
        return True, f"{measured} (tolerance ±{tolerance:.0%}; {setting(rec)})"

    return Claim(
        cid,
        f"{text} (wall time within ±{tolerance:.0%})",
        (variant,),
        check,
        published=f"{published_ms:.0f} ms",
        profiles=("published",),
        cases=(case,),
        timing=True,
    )


def share_near(
    cid: str,
    variant: str,
    key: str,
    published: Mapping[str, int],
    points: float,
    case: str,
    text: str,
) -> Claim:
    """The share of `variant`'s actors ending with `key` is within `points` (a fraction,
    0.15 = 15 percentage points) of the published share; outside it, not reproduced."""
    total = sum(published.values())
    want = published.get(key, 0) / total

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        n = sum(rec["outcomes"].values())
        got = rec["outcomes"].get(key, 0) / n if n else 0.0
        measured = (
            f"{_line(variant, rec)}: {key} {got:.0%} vs published {want:.0%} "
            f"(±{points * 100:.0f} points)"
        )
        if abs(got - want) > points:
            raise NotReproduced(f"{measured}: outside")
        return True, measured

    return Claim(
        cid,
        f"{text} (share of {key} within ±{points * 100:.0f} points)",
        (variant,),
        check,
        published=notation(dict(published)),
        profiles=("published",),
        cases=(case,),
    )
