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
from lab.pinned.footprint import Footprint
from lab.pinned.reduce import Classes
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
    by_scenario: dict[str, tuple[int, int]] = {}
    missed = []
    for sc in EXPLORED:
        every = await _explored(sc, servers, reduce=False)
        reduced = await _explored(sc, servers, reduce=True)
        for variant, record in every["variants"].items():
            for level, cell in record["by_isolation"].items():
                mine = reduced["variants"][variant]["by_isolation"][level]
                ran["every"] += cell["ran"]
                ran["reduced"] += mine["ran"]
                full, cut = by_scenario.get(sc.id, (0, 0))
                by_scenario[sc.id] = (full + cell["ran"], cut + mine["ran"])
                if classes_of(mine) != classes_of(cell):
                    missed.append(f"{sc.id} / {variant} / {level}")
    for sid, (full, cut) in sorted(by_scenario.items(), key=lambda i: i[1][1] - i[1][0]):
        print(f"\n{sid}: {full} -> {cut}", end="")
    print(f"\ninterleavings run: {ran}")  # the figure `make reduction` reports
    assert not missed, f"the reduction lost outcome classes in {missed}"
    assert ran["reduced"] < ran["every"], ran


def test_the_class_comparison_can_fail() -> None:
    """A cell that lacks one outcome of the other is a different set of classes."""
    full = {"outcomes": {"s1=ok s2=40P01": 2, "s1=ok s2=ok": 4}, "broke_by": {}}
    full |= {"broken_invariants": {}, "step_sqlstates": {"40P01": 2}}
    fewer = {**full, "outcomes": {"s1=ok s2=ok": 1}}
    assert classes_of(fewer) != classes_of(full)


def test_a_run_covers_the_orders_that_keep_its_conflicting_pairs() -> None:
    """A run covers an order that swaps two of its steps that commuted in it, not one that
    swaps two that conflicted there (the same session's, or a write of what the other
    read), nor one where a step it never granted moves."""
    table = frozenset({"relation:1"})
    prints = {
        0: Footprint(0, reads=table),  # s1 read
        1: Footprint(1, reads=frozenset({"relation:2"})),  # s2 read: another table
        2: Footprint(0, writes=table),  # s1 write
        3: Footprint(1, writes=table),  # s2 write
    }
    run = ("s1 read", "s2 read", "s1 write", "s2 write")
    classes = Classes()
    classes.learn(run, prints)
    assert classes.covered(run)
    assert classes.covered(("s2 read", "s1 read", "s1 write", "s2 write"))
    assert not classes.covered(("s1 read", "s2 read", "s2 write", "s1 write"))
    skipped = Classes()
    skipped.learn(run, {k: f for k, f in prints.items() if k != 1})
    assert not skipped.covered(("s2 read", "s1 read", "s1 write", "s2 write"))


def test_a_step_commutes_where_it_did_in_that_run() -> None:
    """Two runs in which a step commuted with the other session's in one only: the first
    covers its swaps, though the step conflicted (was beside a wait) in the second."""
    read, other = Footprint(0, reads=frozenset({"relation:1"})), Footprint(1)
    waited = Footprint(0, everything="a session was blocked before or after it")
    classes = Classes()
    classes.learn(("s1 a", "s2 b"), {0: read, 1: other})
    classes.learn(("s2 b", "s1 a"), {0: other, 1: waited})
    assert classes.covered(("s2 b", "s1 a")) and classes.covered(("s1 a", "s2 b"))
    late = Classes()
    late.learn(("s2 b", "s1 a"), {0: other, 1: waited})
    assert not late.covered(("s1 a", "s2 b"))
