"""Fewer orders, none missed: sleep sets over what the server says each statement touched.

Orders that differ only by swapping neighbouring statements that commute end the same
way, so explore runs one of them. Whether two statements commute is read from the
server after each one: its footprint (lab/pinned/footprint.py says the rule: locks in
``pg_locks``, reads and writes, and when a statement commutes with nothing).

The search is the classic stateless one with *sleep sets* (Godefroid, 1996): after the
orders that start a point with statement t are explored, t sleeps in the sibling orders
that start with a statement u commuting with it, and stays asleep down that order while
each next statement commutes with it too. A point whose every held statement sleeps is
covered by orders already run: that order is cut there and counted as pruned. Sleep sets
skip only orders equivalent to one explored, so every outcome a full enumeration finds
is found (under the footprint rule). What the rule cannot see, it does not reduce:
effects outside the database (files, a shared cache, the clock) are in no footprint, so
actors that talk through them must be explored with ``--all-orders``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lab.errors import LabError
from lab.pinned.footprint import Footprint

# choose(depth, labels of the held statements, their actors, footprints so far)
Choose = Callable[[int, list[str], list[int], Sequence[Footprint]], int]


class Redundant(LabError):
    """Every statement held at this point sleeps: the orders from here were covered."""


@dataclass
class Point:
    """A point of the search, reached by a list of choices: its held statements, those
    explored from it (with their footprints there) and those asleep."""

    labels: list[str]
    sleep: dict[str, Footprint]
    actors: list[int] = field(default_factory=list)  # of each held statement
    after: int = 0  # the actor of the statement that led here (0 at the start)
    done: dict[str, Footprint] = field(default_factory=dict)

    def untried(self) -> list[int]:
        """The statements neither explored nor asleep; another actor's before the one
        that just ran (orders that switch actors find a race sooner than straight runs)."""
        left = [
            k
            for k, label in enumerate(self.labels)
            if label not in self.done and label not in self.sleep
        ]
        return sorted(left, key=lambda k: self.actors[k] == self.after if self.actors else 0)


class SleepSets:
    """The search's memory across orders: every point visited, by its choices."""

    def __init__(self) -> None:
        self.points: dict[tuple[int, ...], Point] = {}
        self.path: list[int] = []  # the choices of the order being run
        self.pruned = 0  # orders cut because every held statement slept

    def chooser(self, prefix: Sequence[int]) -> Choose:
        """A `choose` for one order: replay `prefix`, then the first statement neither
        explored nor asleep; Redundant where every one sleeps."""

        def choose(
            depth: int, labels: list[str], actors: list[int], steps: Sequence[Footprint]
        ) -> int:
            if depth == 0:  # a new run of this order (a replay that diverged is run again)
                self.path = []
            here = tuple(self.path)
            point = self.points.get(here)
            if point is None:
                after = steps[depth - 1].actor if depth > 0 else 0
                asleep = self._asleep(here, steps)
                point = self.points[here] = Point(labels, asleep, actors, after)
            if depth > 0:
                self._explored(here, steps[depth - 1])
            if depth < len(prefix):
                k = prefix[depth]
            else:
                untried = point.untried()
                if not untried:
                    self.pruned += 1
                    raise Redundant("every statement held here sleeps")
                k = untried[0]
            self.path.append(k)
            return k

        return choose

    def finished(self, steps: Sequence[Footprint]) -> None:
        """The order ran to its end: its last statement's footprint is known."""
        if self.path and len(steps) == len(self.path):
            self._explored(tuple(self.path), steps[-1])

    def next_prefix(self) -> list[int] | None:
        """Depth first: the deepest point of the last order with a statement neither
        explored nor asleep."""
        for depth in range(len(self.path), -1, -1):
            point = self.points.get(tuple(self.path[:depth]))
            if point is None:
                continue
            untried = point.untried()
            if untried:
                return [*self.path[:depth], untried[0]]
        return None

    def left(self) -> int:
        """Orders not run yet, one per statement neither explored nor asleep at a point
        reached (a lower bound: each leads to one order at least)."""
        return sum(len(point.untried()) for point in self.points.values())

    def _explored(self, child: tuple[int, ...], step: Footprint) -> None:
        """Note at the parent of `child` that its statement was explored, with `step`."""
        parent = self.points[child[:-1]]
        parent.done.setdefault(parent.labels[child[-1]], step)

    def _asleep(self, here: tuple[int, ...], steps: Sequence[Footprint]) -> dict[str, Footprint]:
        """The sleep set of a new point: what slept or was explored at its parent and
        commutes with the statement that led here."""
        if not here:
            return {}
        parent = self.points[here[:-1]]
        chosen = parent.labels[here[-1]]
        came = steps[len(here) - 1]
        before = {**parent.sleep, **{k: v for k, v in parent.done.items() if k != chosen}}
        return {label: f for label, f in before.items() if f.commutes_with(came)}
