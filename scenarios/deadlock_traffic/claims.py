"""deadlock-traffic: what the document says, how each claim is judged, and the assembly.

DP-9 compares cases: the buggy checkout at each size (cases n10 ... n100, and the
defaults' 200 carts), all at burst arrival and one deadlock_timeout; the claim holds when
the 40P01 count and the server's deadlock count rise at every step. The fix is judged at
200 carts.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from lab.core.claims import Claim, Record, all_ok, deadlocks
from lab.core.scenario import Defaults, declare
from lab.core.steps import as_actor
from scenarios.deadlock_traffic import deadlock_traffic as code


def _grows(records: Mapping[str, Record]) -> tuple[bool, str]:
    recs = [records[f"buggy@{c}"] for c in code.POINTS]
    counts = [r["outcomes"].get("40P01", 0) for r in recs]
    server = [r["evidence"].get("pg_stat_deadlocks", 0) for r in recs]
    rising = all(a < b for xs in (counts, server) for a, b in itertools.pairwise(xs))
    seen = ", ".join(
        f"n={r['knobs']['n']}: {c} ({100 * c / r['knobs']['n']:.0f} %, server {s})"
        for r, c, s in zip(recs, counts, server, strict=True)
    )
    dt = recs[0]["knobs"]["deadlock_timeout_ms"]
    return rising, f"buggy, burst, deadlock_timeout {dt} ms: 40P01 {seen}"


CLAIMS = (
    Claim(
        "DP-9",
        f"buggy: the 40P01 count (and the server's deadlock count) rises with every step of "
        f"n = {', '.join(map(str, code.SIZES))} at one arrival pattern",
        tuple(f"buggy@{c}" for c in code.POINTS),
        _grows,
        published="死锁会随着流量增加而增多",
        cases=code.POINTS,
        across=True,
    ),
    all_ok("DP-9", "fixed", f"fixed: all {code.SIZES[-1]} sorted checkouts succeed"),
    deadlocks("DP-9", "fixed", f"fixed: zero deadlocks at {code.SIZES[-1]} carts", expect=False),
)

SCENARIO = declare(
    code,
    kind="actors",
    variants={"buggy": as_actor(code.buggy), "fixed": as_actor(code.fixed)},
    outcomes=("ok", "40P01"),
    claims=CLAIMS,
    published={"buggy": "死锁会随着流量增加而增多"},
    defaults=Defaults(n=code.SIZES[-1], arrival="burst", actor_timeout_s=120, run_timeout_s=300),
    sources=("DP",),
    quick={"deadlock_timeout_ms": 100},
    cases=code.CASES,
)
