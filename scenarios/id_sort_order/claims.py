"""id-sort-order: what the document claims, how each claim is judged, and the assembly.

Under a load (20 transfers at burst) the two paths deadlock or not; on every
interleaving of one app-path and one SQL-path transfer (`locklab explore
id-sort-order`) the string sort deadlocks in some, the numeric sort in none.
"""

from __future__ import annotations

from lab.core.claims import all_ok, deadlocks, invariants_hold, on_mutant
from lab.core.mutants import commits_partial
from lab.core.scenario import Defaults, Param, declare
from lab.core.steps import as_actor
from lab.pinned import canonical, error_in
from scenarios.id_sort_order import id_sort_order as code

PUBLISHED = "thứ tự lại không nhất quán và deadlock quay lại"
# The invariant holds on every variant: a 40P01 rolls its victim back whole. Its
# counterfactual drops that: both orders writing as they lock, a victim's first row committed.
PARTIAL = "mutant-commits-partial"
CLAIMS = (
    deadlocks(
        "DL-6",
        "buggy",
        "String-sorted path against ORDER BY id deadlocks",
        expect=True,
        published=PUBLISHED,
    ),
    all_ok("DL-6", "fixed", "Both paths in numeric order: every transfer commits"),
    deadlocks("DL-6", "fixed", "Both paths in numeric order: zero deadlocks", expect=False),
    *(
        on_mutant(invariants_hold("DL-6", v, f"{v}: balances moved once per commit"), PARTIAL)
        for v in ("buggy", "fixed")
    ),
    error_in(
        "DL-6",
        "buggy",
        "40P01",
        "String sort vs ORDER BY id: some interleavings of two transfers deadlock",
        expect=True,
        published=PUBLISHED,
    ),
    error_in(
        "DL-6",
        "fixed",
        "40P01",
        "Numeric order in both paths: no interleaving deadlocks",
        expect=False,
    ),
    canonical(
        "DL-6",
        "buggy",
        "app-first",
        "The app path holds 10, the SQL path locks 9 and "
        "waits for 10, the app path waits for 9: one of them gets 40P01",
        # only the first waiter must be seen blocked: the second waits only until a
        # detector fires, and the 40P01 is the server's report that it did
        outcomes=("ok", "40P01"),
        waited=("s2 lock-both",),
        kept=True,
    ),
)

SCENARIO = declare(
    code,
    outcomes=("ok", "40P01"),
    claims=CLAIMS,
    published={"buggy": PUBLISHED},
    defaults=Defaults(n=20, arrival="burst", actor_timeout_s=120, run_timeout_s=300),
    params={
        "step_pause_ms": Param(5.0, "other logic between the app path's two locks"),
    },
    sources=("DL",),
    mutants={PARTIAL: as_actor(commits_partial(code.touch_each))},
    quick={"deadlock_timeout_ms": 100},
)
