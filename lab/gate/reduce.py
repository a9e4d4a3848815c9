"""Fewer orders, none missed: sleep sets over what the server says each statement touched.

Two statements of different actors *commute* when running them in either order leaves
the same database and gives each the same result. Orders that differ only by swapping
commuting neighbours are one order for every outcome explore reports, so running one of
them is enough. This module decides commutation from what the server shows, never from
the SQL text:

* After each statement the gate reads the statement's session in ``pg_locks``: the
  relations (tables, indexes, sequences) and other objects its transaction has locked,
  and in which mode. ``AccessShareLock`` and ``SIReadLock`` are reads; every other mode
  is a write (``ROW SHARE`` of ``FOR UPDATE`` included). The footprint of a statement is
  what its session held before it and after it: a transaction keeps its locks to its
  end, so this covers the statement, and a ``COMMIT`` covers all the transaction did
  (a commit counts as a write of everything it held: it publishes the writes).
* Two footprints conflict when one writes an object the other reads or writes.
  Statements of the same actor always conflict (the program orders them).
* A statement commutes with nothing (``everything``) when the server cannot show what
  it touched: it ran outside a transaction (status I before and after: its locks are
  gone by the time anyone looks), it took its transaction's snapshot (REPEATABLE READ
  and SERIALIZABLE: ``backend_xmin`` appeared, so it fixes what every later statement
  sees), it names an advisory lock (a ``pg_try_advisory_lock`` that fails leaves no
  lock behind), a session was blocked before or after it (a wait is the server ordering
  two statements), or its actor exited.

The search is the classic stateless one with *sleep sets* (Godefroid, 1996): after the
orders that start a point with statement t are explored, t sleeps in the sibling orders
that start with a statement u commuting with it, and stays asleep down that order while
each next statement commutes with it too. A point whose every held statement sleeps is
covered by orders already run: that order is cut there and counted as pruned. Sleep sets
alone never skip an order that is not equivalent to one explored, so every outcome a
full enumeration finds is found (under the footprint rule above). What the rule cannot
see, it does not reduce: effects outside the database (files, a shared cache, the
clock) are not in any footprint, so actors that talk through them must be explored with
``--all-orders``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lab.errors import LabError

READ_MODES = frozenset({"AccessShareLock", "SIReadLock"})


@dataclass(frozen=True)
class Footprint:
    """What one statement touched, as the server showed it (see the module doc)."""

    actor: int
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    everything: str = ""  # why it commutes with nothing ("" when it may)

    def commutes_with(self, other: Footprint) -> bool:
        """Whether running the two in either order is the same (different actors, no
        object one writes and the other touches)."""
        if self.everything or other.everything or self.actor == other.actor:
            return False
        return not (self.writes & (other.reads | other.writes) or other.writes & self.reads)


@dataclass(frozen=True)
class Look:
    """One session in the server's eyes: its granted locks (object, mode) and whether it
    holds a snapshot."""

    locks: frozenset[tuple[str, str]] = frozenset()
    snapshot: bool = False


def footprint(
    actor: int,
    before: Look,
    after: Look,
    status: tuple[str, str],
    everything: str = "",
) -> Footprint:
    """The footprint of a statement from its session's look before and after it and its
    ReadyForQuery status bytes (before, after); `everything`: a reason found already."""
    if not everything and status == ("I", "I"):
        everything = "ran outside a transaction"
    if not everything and after.snapshot and not before.snapshot:
        everything = "took its transaction's snapshot"
    if everything:
        return Footprint(actor, everything=everything)
    held = before.locks | after.locks
    if status[1] == "I":  # it ended the transaction: all it held is published
        return Footprint(actor, writes=frozenset(obj for obj, _ in held))
    reads = frozenset(obj for obj, mode in held if mode in READ_MODES)
    writes = frozenset(obj for obj, mode in held if mode not in READ_MODES)
    return Footprint(actor, reads - writes, writes)


# choose(depth, labels of the held statements, footprints of the statements so far)
Choose = Callable[[int, list[str], Sequence[Footprint]], int]


class Redundant(LabError):
    """Every statement held at this point sleeps: the orders from here were covered."""


@dataclass
class Point:
    """A point of the search, reached by a list of choices: its held statements, those
    explored from it (with their footprints there) and those asleep."""

    labels: list[str]
    sleep: dict[str, Footprint]
    done: dict[str, Footprint] = field(default_factory=dict)

    def untried(self) -> list[int]:
        return [
            k
            for k, label in enumerate(self.labels)
            if label not in self.done and label not in self.sleep
        ]


class SleepSets:
    """The search's memory across orders: every point visited, by its choices."""

    def __init__(self) -> None:
        self.points: dict[tuple[int, ...], Point] = {}
        self.path: list[int] = []  # the choices of the order being run
        self.pruned = 0  # orders cut because every held statement slept

    def chooser(self, prefix: Sequence[int]) -> Choose:
        """A `choose` for one order: replay `prefix`, then the first statement neither
        explored nor asleep; Redundant where every one sleeps."""

        def choose(depth: int, labels: list[str], steps: Sequence[Footprint]) -> int:
            if depth == 0:  # a new run of this order (a replay that diverged is run again)
                self.path = []
            here = tuple(self.path)
            point = self.points.get(here)
            if point is None:
                point = self.points[here] = Point(labels, self._asleep(here, steps))
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
