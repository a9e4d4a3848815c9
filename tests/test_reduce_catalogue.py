"""The reduction on the catalogue's pinned scenarios (lab/pinned/reduce.py): explored
with `reduce`, a scenario shows every outcome class that every interleaving shows, in
fewer runs where some orders are equivalent.

`make test` runs the scenarios where the reduction finds equivalent orders; `make
reduction` (LOCKLAB_REDUCTION=all) runs the whole catalogue and prints the totals."""

from __future__ import annotations

import os
from typing import Any

import pytest

import scenarios
from lab.core.scenario import Scenario
from lab.pinned import explore, pinned_of
from lab.servers import Servers

DEADLOCK_MS = 100  # explore's own default: a deadlocking order costs 0.1 s

# A scenario in which some orders are equivalent, at two levels (the rest: make reduction)
SAMPLE = ("lost-update",)  # READ COMMITTED and REPEATABLE READ
EXPLORED = [
    sc
    for sc in scenarios.SCENARIOS
    if sc.pinned is not None
    and not pinned_of(sc).canonical_only
    and (os.environ.get("LOCKLAB_REDUCTION") == "all" or sc.id in SAMPLE)
]
# What an outcome class is: how each session ended, which broke an invariant, which
# invariants broke, which SQLSTATEs a step raised.
CLASSES = ("outcomes", "broke_by", "broken_invariants", "step_sqlstates")


def classes_of(cell: dict[str, Any]) -> dict[str, set[str]]:
    return {key: set(cell[key]) for key in CLASSES}


async def _explored(sc: Scenario, servers: Servers, reduce: bool) -> dict[str, Any]:
    pinned = pinned_of(sc)
    plan = {variant: list(pinned.isolation) for variant in pinned.steps}
    tag = "reduced" if reduce else "every"
    return await explore(
        sc, servers, plan, run_id=f"test-{tag}", deadlock_ms=DEADLOCK_MS, reduce=reduce
    )


@pytest.mark.slow
async def test_the_reduction_misses_no_outcome_and_runs_fewer_orders(servers: Servers) -> None:
    """Each scenario, variant and level: the reduced explore's outcome classes are the full
    one's, and it runs fewer interleavings in all."""
    ran = {"every": 0, "reduced": 0}
    missed = []
    for sc in EXPLORED:
        every = await _explored(sc, servers, reduce=False)
        reduced = await _explored(sc, servers, reduce=True)
        for variant, record in every["variants"].items():
            for level, cell in record["by_isolation"].items():
                mine = reduced["variants"][variant]["by_isolation"][level]
                ran["every"] += cell["ran"]
                ran["reduced"] += mine["ran"]
                if classes_of(mine) != classes_of(cell):
                    missed.append(f"{sc.id} / {variant} / {level}")
    print(f"\ninterleavings run: {ran}")  # the figure `make reduction` reports
    assert not missed, f"the reduction lost outcome classes in {missed}"
    assert ran["reduced"] < ran["every"], ran


def test_the_class_comparison_can_fail() -> None:
    """A cell that lacks one outcome of the other is a different set of classes."""
    full = {"outcomes": {"s1=ok s2=40P01": 2, "s1=ok s2=ok": 4}, "broke_by": {}}
    full |= {"broken_invariants": {}, "step_sqlstates": {"40P01": 2}}
    fewer = {**full, "outcomes": {"s1=ok s2=ok": 1}}
    assert classes_of(fewer) != classes_of(full)
