"""row-lock-modes: what the documents claim, how each claim is judged, and the assembly.

Every claim is judged on one run per variant (the code in row_lock_modes.py): whom the
server shows the child INSERT blocked by (pg_blocking_pids) under each parent UPDATE, and
the 16 pairs of modes, where the waiting probe and the NOWAIT probe must agree with the
documented table (CONFLICTS).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from lab.core.claims import Claim, Record, mutation
from lab.core.scenario import Defaults, declare
from scenarios.row_lock_modes import row_lock_modes as code
from scenarios.row_lock_modes.row_lock_modes import CONFLICTS

Judge = Callable[[Mapping[str, Record]], tuple[bool, str]]


def _parent(variant: str, blocks: bool) -> Judge:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        p = records[variant]["evidence"]["parent_update"]
        seen = (
            f"blocked by {p['blocked_by']} (holder {p['holder']})"
            if p["blocked_by"]
            else "not blocked"
        )
        held = (p["holder"] in (p["blocked_by"] or [])) if blocks else p["blocked_by"] is None
        return held, f"{variant}: UPDATE parents SET {p['change']} open; child INSERT {seen}"

    return check


def _one_pair_flipped(rec: Record) -> None:
    cell = next(c for c in rec["evidence"]["matrix"] if c["held"] != c["asked"])
    cell["nowait"] = "ok" if cell["nowait"] == "55P03" else "55P03"
    holder = rec["evidence"]["holder"]
    cell["blocked_by"] = [] if holder in (cell["blocked_by"] or []) else [holder]


def _matrix(records: Mapping[str, Record]) -> tuple[bool, str]:
    ev = records["matrix"]["evidence"]
    agree = [
        c
        for c in ev["matrix"]
        if (ev["holder"] in (c["blocked_by"] or []))
        == (c["nowait"] == "55P03")
        == (c["asked"] in CONFLICTS[c["held"]])
    ]
    return len(ev["matrix"]) == len(agree) == 16, (
        f"{len(agree)}/16 pairs as documented (pg_blocking_pids and NOWAIT agree):\n"
        + ev["matrix_table"]
    )


CLAIMS = (
    Claim(
        "LC-34",
        "buggy: an UPDATE of the parent's key blocks a child INSERT",
        ("buggy",),
        _parent("buggy", True),
        published="UPDATE đổi giá trị primary key của cha lấy FOR UPDATE và sẽ chặn (và bị chặn "
        "bởi) insert con",
    ),
    Claim(
        "LC-34",
        "fixed: an UPDATE of another column does not",
        ("fixed",),
        _parent("fixed", False),
        published="UPDATE thường không chặn insert con",
    ),
    Claim(
        "LC-34",
        "matrix: the 16 pairs of row-lock modes block as documented",
        ("matrix",),
        _matrix,
        # the matrix is PostgreSQL's, whatever the variant: its counterfactual is a server
        # whose FOR KEY SHARE conflicted with FOR SHARE (one pair that blocks otherwise)
        counterfactual=mutation(
            "matrix", _one_pair_flipped, "the conflict matrix is the server's: no run changes it"
        ),
        published="FOR UPDATE > FOR NO KEY UPDATE > FOR SHARE > FOR KEY SHARE; FOR KEY SHARE chỉ "
        "xung đột với FOR UPDATE",
    ),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed, "matrix": code.matrix},
    outcomes=("ok", "blocked"),
    claims=CLAIMS,
    published={"matrix": "FOR KEY SHARE chỉ xung đột với FOR UPDATE"},
    defaults=Defaults(n=1, run_timeout_s=60),
    script_connections=lambda n: 2,
    sources=("LC",),
)
