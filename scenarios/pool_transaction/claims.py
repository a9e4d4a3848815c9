"""pool-transaction: what the document says, how each claim is judged, and the assembly.

Each variant ends with two words (the ROLLBACK undone or not, the FOR UPDATE lock held or
not, read on the server: the balance afterwards, another request's NOWAIT); the claims
judge both, and show what asyncpg reported about connections released mid-transaction.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Claim, Record
from lab.core.scenario import Defaults, declare
from scenarios.pool_transaction import pool_transaction as code


def _claim(variant: str, want: Mapping[str, int], text: str, published: str = "") -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        ev = rec["evidence"]
        return dict(rec["outcomes"]) == dict(want), (
            f"{variant}: balance after ROLLBACK {ev['balance_after_rollback']} (was "
            f"{code.BALANCE}); "
            f"row locked for another request: {ev['row_locked']}; asyncpg: "
            f"{sorted(set(ev['asyncpg']))}"
        )

    return Claim("LC-26", text, (variant,), check, published)


CLAIMS = (
    _claim(
        "buggy",
        {code.NOT_UNDONE: 1, code.LOCK_NOT_HELD: 1},
        "buggy: BEGIN, UPDATE, ROLLBACK each through the pool: the ROLLBACK undoes nothing, and "
        "a row read FOR UPDATE is not locked for the next statement (NOWAIT gets it)",
        published="dùng pool.query cho từng câu sẽ chạy mỗi câu trên connection khác nhau",
    ),
    _claim(
        "fixed",
        {code.UNDONE: 1, code.LOCK_HELD: 1},
        "fixed (withTx, one client): the ROLLBACK undoes the UPDATE; the FOR UPDATE lock is held "
        "(NOWAIT gets 55P03)",
        published="dùng một client cho cả transaction",
    ),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed},
    outcomes=(code.UNDONE, code.NOT_UNDONE, code.LOCK_HELD, code.LOCK_NOT_HELD),
    claims=CLAIMS,
    published={"buggy": "pool.query cho từng câu", "fixed": "withTx: một client"},
    defaults=Defaults(n=1, run_timeout_s=60),
    sources=("LC",),
    script_connections=lambda n: 3,  # the pool's two and another request
)
