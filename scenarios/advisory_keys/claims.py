"""advisory-keys: what the document claims, how each claim is judged, and the assembly.

Judged on pinned runs (`locklab explore advisory-keys`): job B try-locks, then asks for
its own key while job A holds A's (the canonical order, b-while-a-holds), and every
other order of the same steps. The transcript shows what pg_locks holds for A, what
B's try-lock returned and whether the server showed B's lock blocked; the invariants
check on the server that the two names really share one hashtext().
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lab.core.claims import Claim
from lab.core.scenario import Defaults, declare
from lab.pinned import broke_in_some, kept_in_all, on_canonical, waited_in
from scenarios.advisory_keys import advisory_keys as code

ORDER = "b-while-a-holds"
COLLIDES = "hashtext('job:daily-invoice'), trả về int4, nên có khả năng va chạm"
TWO_KEYS = "dùng dạng hai tham số (namespace int4, id int4)"
LOCK = re.compile(r"classid=(-?\d+) objid=(-?\d+) objsubid=(\d+)")


def a_holds(run: Mapping[str, Any]) -> tuple[int, ...] | None:
    """(classid, objid, objsubid) of job A's advisory lock, from its `locks` step."""
    line = next((x for x in run["transcript"].splitlines() if x.startswith("s1 locks")), "")
    m = LOCK.search(line)
    return tuple(int(g) for g in m.groups()) if m else None


def _order(
    variant: str,
    text: str,
    ends: dict[str, str],
    waited: list[str],
    lock: tuple[int, int, int],
    published: str,
) -> Claim:
    """B while A holds: each job's end, who the server showed waiting, A's pg_locks row;
    and on the server, the two names' hashtext() equal to COLLIDING_HASH."""

    def check(run: Mapping[str, Any]) -> tuple[bool, str]:
        inv = {i["name"]: i for i in run["invariants"]}
        held = (
            run["outcomes"] == ends
            and run["waited"] == waited
            and a_holds(run) == lock
            and inv[code.COLLIDE]["held"]
        )
        return held, (
            f"{variant}: {inv[code.COLLIDE]['detail']}; A's pg_locks (classid, objid, objsubid) "
            f"{a_holds(run)}; B ends {run['outcomes'].get('s2')}, "
            f"seen waiting: {', '.join(run['waited']) or 'nobody'}"
        )

    return on_canonical("LC-33", variant, ORDER, text, check, published=published)


CLAIMS = (
    _order(
        "buggy",
        "buggy: two job names with one hashtext() block each other (try-lock false, lock waits)",
        {"s1": "ok", "s2": "lock_busy"},
        ["s2 lock"],
        (0, code.COLLIDING_HASH, 1),
        COLLIDES,
    ),
    _order(
        "fixed",
        "fixed: their two-key (namespace, id) locks do not",
        {"s1": "ok", "s2": "ok"},
        [],
        (code.NAMESPACE_JOBS, 1, 2),
        TWO_KEYS,
    ),
    broke_in_some("LC-33", "buggy", "buggy: some orders of the two jobs refuse B's try-lock"),
    waited_in(
        "LC-33", "buggy", "buggy: in some orders one job's lock waits for the other's", expect=True
    ),
    kept_in_all(
        "LC-33",
        "fixed",
        "fixed: no order of the two jobs refuses B's try-lock",
        counterfactual=None,
    ),
    waited_in(
        "LC-33",
        "fixed",
        "fixed: in no order does one job's lock wait for the other's",
        expect=False,
    ),
)

SCENARIO = declare(
    code,
    validate=code.validate,
    outcomes=("ok", "lock_busy"),
    claims=CLAIMS,
    published={"buggy": COLLIDES, "fixed": "pg_advisory_xact_lock(1, tenant_id)"},
    defaults=Defaults(n=2, arrival="burst", actor_timeout_s=30, run_timeout_s=60),
    sources=("LC",),
)
