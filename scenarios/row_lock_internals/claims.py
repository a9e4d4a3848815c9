"""row-lock-internals: what the documents claim, how each claim is judged, and the assembly.

Every claim is judged on one run per variant (the code in row_lock_internals.py): the
batch's WAL bytes, its pg_locks rows and the rows another session could still lock
(LC-28); the MultiXact counter and the hot parent's xmax members (LC-29).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from lab.core.claims import Claim, Record
from lab.core.scenario import Defaults, declare
from scenarios.row_lock_internals import row_lock_internals as code
from scenarios.row_lock_internals.row_lock_internals import (
    HOT_INSERTS,
    MIN_WAL_PER_ROW,
    ROWS,
)

Judge = Callable[[Mapping[str, Record]], tuple[bool, str]]


def _batch(variant: str, locked: bool) -> Judge:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        b = records[variant]["evidence"]["batch"]
        kinds = sorted({lk["locktype"] for lk in b["pg_locks"]})
        per_row = b["wal_bytes"] / b["rows"]
        if locked:
            held = (
                b["rows"] == ROWS
                and b["free_rows"] == 0
                and per_row >= MIN_WAL_PER_ROW
                and len(b["pg_locks"]) < 10
                and set(kinds) <= {"relation", "transactionid", "virtualxid"}
            )
        else:
            held = b["rows"] == ROWS and b["free_rows"] == ROWS and b["wal_bytes"] == 0
        return held, (
            f"{variant}: SELECT {b['clause'] or '(no lock)'} over {b['rows']} rows: its WAL "
            f"{b.get('wal_records', '?')} records, {b['wal_bytes']} bytes ({per_row:.1f}/row, "
            f"EXPLAIN (ANALYZE, WAL)); pg_locks {len(b['pg_locks'])} entries "
            f"({', '.join(kinds)}); rows another session could still lock: {b['free_rows']}"
        )

    return check


def _multixacts(variant: str, hot: bool) -> Judge:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        c = records[variant]["evidence"]["children"]
        n = c["inserts"]
        mx = c["multixacts"]
        members = c["xmax_members"]
        modes = ", ".join(sorted({m["mode"] for m in members}))
        if hot:
            held = n - 2 <= mx <= n + 2 and sorted(m["xid"] for m in members) == sorted(
                c["inserters"]
            )
        else:
            held = mx == 0 and not members
        return held and c["open_together"] == n, (
            f"{variant}: {n} overlapping child inserts ({c['open_together']} open together) "
            f"{'under one parent' if hot else 'one per parent'}: MultiXact counter +{mx}; "
            f"parent's xmax lists {len(members)} lockers ({modes or '-'})"
        )

    return check


CLAIMS = (
    Claim(
        "LC-28",
        f"buggy: FOR UPDATE over {ROWS} rows: no per-row pg_locks entry, WAL written",
        ("buggy",),
        _batch("buggy", True),
        published="Row lock được ghi ngay trong tuple header ... lock một row là ghi vào page "
        "(dirty page, WAL)",
    ),
    Claim(
        "LC-28",
        "fixed: the same read without a locking clause writes no WAL",
        ("fixed",),
        _batch("fixed", False),
    ),
    Claim(
        "LC-29",
        f"buggy: {HOT_INSERTS} overlapping child inserts under one parent mint about as many "
        "MultiXacts",
        ("buggy",),
        _multixacts("buggy", True),
        published="nhiều transaction cùng FOR SHARE/FOR KEY SHARE một row cha nóng (mỗi insert "
        "con), tạo nhiều MultiXact",
    ),
    Claim(
        "LC-29",
        "fixed: the same inserts spread one per parent mint none",
        ("fixed",),
        _multixacts("fixed", False),
    ),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed},
    outcomes=("ok",),
    claims=CLAIMS,
    published={"buggy": "lock một row là ghi vào page (dirty page, WAL); ... tạo nhiều MultiXact"},
    defaults=Defaults(n=1, run_timeout_s=60),
    script_connections=lambda n: HOT_INSERTS + 2,
    alone=("",),  # the MultiXact counter is the cluster's: other runs' FK checks move it
    sources=("LC",),
)
