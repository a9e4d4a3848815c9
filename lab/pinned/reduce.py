"""Fewer pinned orders, none missed: one schedule of each set of equivalent ones.

A pinned run takes its whole schedule up front, so the search cannot choose step by step
as the gate's sleep sets do (lab/gate/reduce.py). Instead each run keeps the pairs of its
steps that did *not* commute in it, by their footprints in that run
(lab/pinned/footprint.py): two steps of one session, a step not granted, and two
footprints that conflict. A schedule is *covered* when some run so far puts every such
pair of its own in the same order; the interleavings are gone through once, and a
covered one is not run.

The rule is the happens-before of one execution (Mazurkiewicz traces, as dynamic
partial-order reduction uses them: Flanagan and Godefroid 2005): a covered schedule
turns into that run by swapping neighbours that commuted *in that run*, and ends as it
did. One swap: in a run ``u a b v`` where a and b commuted, neither writes what the other
reads or writes, so b after u reads what it read after u a (a wrote none of it) and runs
alike, with the same footprint and the same writes; a after u b likewise; both leave the
same database; v runs alike. Every step keeps its footprint through the swap, so the
pairs that commuted still do, and the next swap holds by the same argument: any two
orders of the run's steps that keep each non-commuting pair in place are joined by such
swaps (a linear extension of a partial order reaches every other by swapping adjacent
unordered neighbours). A step never granted in a run commutes with nothing there, so it
stays where it was.

This is finer than giving each step the union of what it touched in every run: a step
that commuted in one run but not in another (a step beside a wait only in some orders)
commutes where it did. A covered schedule stays covered as runs are added, so one pass
suffices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lab.core.steps import parse_step
from lab.pinned.footprint import Footprint

Pairs = frozenset[tuple[str, str]]  # (earlier step, later step): an order that must hold


def ordered(schedule: Sequence[str], footprints: Mapping[int, Footprint]) -> Pairs:
    """The pairs of a run's steps that did not commute in it, in the run's order: the
    same session's, one never granted (no footprint), or footprints that conflict."""
    pairs = set()
    for i, one in enumerate(schedule):
        for j in range(i + 1, len(schedule)):
            a, b = footprints.get(i), footprints.get(j)
            other = schedule[j]
            same = parse_step(one)[0] == parse_step(other)[0]
            if same or a is None or b is None or not a.commutes_with(b):
                pairs.add((one, other))
    return frozenset(pairs)


@dataclass
class Classes:
    """The schedules run so far, each with its pairs of steps that did not commute."""

    runs: list[tuple[frozenset[str], Pairs]] = field(default_factory=list)

    def learn(self, schedule: Sequence[str], footprints: Mapping[int, Footprint]) -> None:
        """A valid run of `schedule`, with the footprint of each item it granted."""
        self.runs.append((frozenset(schedule), ordered(schedule, footprints)))

    def covered(self, schedule: Sequence[str]) -> bool:
        """Whether a run so far is equivalent to `schedule`: the same steps, and every
        pair that did not commute in it in the same order."""
        at = {step: k for k, step in enumerate(schedule)}
        steps = frozenset(schedule)
        return any(
            steps == run and all(at[a] < at[b] for a, b in pairs) for run, pairs in self.runs
        )
