"""money-transfer DL-7 on every interleaving of two opposite transfers: whether some step
raised 40P01 (buggy: in some; fixed: in none), counted on the steps of the explore record
at read committed rather than on how the sessions ended, since a retried loser ends ok.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Claim, Record
from lab.pinned import RC


def _deadlocks_in(variant: str, text: str, *, expect: bool) -> Claim:
    """Some interleaving (expect=True) or none has a step that raised 40P01, counted on the
    steps, not on how the sessions ended: a retried loser ends ok."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        cell = records[variant]["by_isolation"].get(RC)
        if cell is None or "step_sqlstates" not in cell:
            return None  # not explored at read committed, or an older record
        k = cell["step_sqlstates"].get("40P01", 0)
        return cell["ran"] > 0 and (k > 0) == expect, (
            f"{variant}: a step raised 40P01 in {k} of {cell['ran']} interleavings; "
            f"sessions ended {cell['outcomes']}"
        )

    return Claim("DL-7", text, (variant,), check, explore=True, levels=(RC,))
