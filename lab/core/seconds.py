"""Claims on the published *seconds*: a wall time within a tolerance, or a gap kept visible.

Shapes hold on any machine; seconds need the documents' setting (a network between the
app and PostgreSQL, node-postgres' pool). A scenario that found such a setting by
measurement names it as a case and judges its wall times with `wall_within`; where no
physical setting reached the published number, `wall_not_reproduced` keeps the gap in
the verdicts (the text says "not reproduced", the measured value says by how much), so
it cannot silently turn into "held" or vanish.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import NOT_REPRODUCED, Claim, Record
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
    """`variant`'s wall time is within ±`tolerance` (a fraction) of `published_ms`."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        ratio = rec["wall_ms"] / published_ms
        return abs(ratio - 1) <= tolerance, (
            f"{_line(variant, rec)} = x{ratio:.2f} of published "
            f"(tolerance ±{tolerance:.0%}; {setting(rec)})"
        )

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


def wall_not_reproduced(
    cid: str, variant: str, published_ms: float, below: float, case: str, text: str
) -> Claim:
    """The documented gap: `variant` stays under `below` x `published_ms` at this setting.

    What it claims is what the lab reproduces, the gap, and it can fail: a run that reaches
    the published seconds turns it "not held", the signal to replace it with `wall_within`.
    Its text starts with NOT_REPRODUCED, and verify counts a held one apart from the held
    total and marks its row, so a published number the lab misses never reads as "held"."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        ratio = rec["wall_ms"] / published_ms
        return ratio < below, (
            f"{_line(variant, rec)} = x{ratio:.2f} of published; not reproduced "
            f"(gap kept while below x{below}; {setting(rec)})"
        )

    return Claim(
        cid,
        f"{NOT_REPRODUCED} {published_ms:.0f} ms (published); what is reproduced is the gap: "
        f"{text}, under x{below} of it",
        (variant,),
        check,
        published=f"{published_ms:.0f} ms",
        profiles=("published",),
        cases=(case,),
        gap=True,
        timing=True,
        counterfactual="a gap is the lab's own finding, not the document's: it is NOT "
        "REPRODUCED whatever it measures, never counted held",
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
    0.15 = 15 percentage points) of the published share."""
    total = sum(published.values())
    want = published.get(key, 0) / total

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        n = sum(rec["outcomes"].values())
        got = rec["outcomes"].get(key, 0) / n if n else 0.0
        return abs(got - want) <= points, (
            f"{_line(variant, rec)}: {key} {got:.0%} vs published {want:.0%} "
            f"(±{points * 100:.0f} points)"
        )

    return Claim(
        cid,
        f"{text} (share of {key} within ±{points * 100:.0f} points)",
        (variant,),
        check,
        published=notation(dict(published)),
        profiles=("published",),
        cases=(case,),
    )
