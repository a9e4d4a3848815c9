"""Fewer pinned orders, none missed: one schedule of each set of equivalent ones.

A pinned run takes its whole schedule up front, so the search cannot choose step by step
as the gate's sleep sets do (lab/gate/reduce.py). Instead each step (``s1 read``) keeps
the union of the footprints it showed in every run so far (lab/pinned/footprint.py). Two
schedules are equivalent when one turns into the other by swapping neighbours whose
footprints commute; a schedule runs only when no run so far is equivalent to it.

A step whose footprint grows may split a set that looked like one: so the schedules are
gone through again, until a pass runs nothing (a fixed point; footprints only grow and
are finite). Then every step of every run touched no more than its union, so a schedule
not run turns into a run by swaps of steps that really commuted there, and ends as that
run did. A step never seen granted commutes with nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lab.core.steps import parse_step
from lab.pinned.footprint import Footprint


def union(one: Footprint, other: Footprint) -> Footprint:
    """What either footprint touched (the same actor's)."""
    return Footprint(
        one.actor,
        one.reads | other.reads,
        one.writes | other.writes,
        one.everything or other.everything,
    )


@dataclass
class Classes:
    """The schedules run so far and what each step touched over all of them."""

    prints: dict[str, Footprint] = field(default_factory=dict)
    runs: list[tuple[str, ...]] = field(default_factory=list)
    _forms: set[tuple[str, ...]] | None = None  # the runs' normal forms, while prints hold

    def learn(self, schedule: Sequence[str], footprints: Mapping[int, Footprint]) -> None:
        """A valid run of `schedule`, with the footprint of each item it granted."""
        self.runs.append(tuple(schedule))
        for k, found in footprints.items():
            known = self.prints.get(schedule[k])
            grown = found if known is None else union(known, found)
            if grown != known:
                self.prints[schedule[k]] = grown
                self._forms = None
        if self._forms is not None:
            self._forms.add(self.normal(schedule))

    def covered(self, schedule: Sequence[str]) -> bool:
        """Whether a run so far is equivalent to `schedule`."""
        if self._forms is None:
            self._forms = {self.normal(r) for r in self.runs}
        return self.normal(schedule) in self._forms

    def normal(self, schedule: Sequence[str]) -> tuple[str, ...]:
        """The least schedule (step by step, by name) equivalent to `schedule`: two
        schedules have the same one exactly when they are equivalent."""
        left = list(schedule)
        out: list[str] = []
        while left:
            free = [
                k
                for k, step in enumerate(left)
                if all(self._commute(before, step) for before in left[:k])
            ]
            k = min(free, key=lambda k: left[k])
            out.append(left.pop(k))
        return tuple(out)

    def _commute(self, one: str, other: str) -> bool:
        if parse_step(one)[0] == parse_step(other)[0]:
            return False
        a, b = self.prints.get(one), self.prints.get(other)
        return a is not None and b is not None and a.commutes_with(b)
