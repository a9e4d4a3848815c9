"""The document's two checkers, pure Python: the lock hierarchy (DP-6) and the wait-for
graph (DP-7). hierarchy-check runs the first inside its transfers; the detector
(detector.py) feeds the second from what it sees during every run."""

from __future__ import annotations

from enum import IntEnum


class LockLevel(IntEnum):
    """The document's levels: always acquire parent before child."""

    SYSTEM = 0
    REGION = 1
    ACCOUNT = 2
    TRANSACTION = 3


Level = tuple[LockLevel, int]  # (level, rank inside the level)


class HierarchyViolation(Exception):
    """LockHierarchyViolation: a lock at or above a level already held."""


class LockHierarchy:
    """The document's HierarchicalLock check (DP-6): a new lock's level must be greater than
    every level held (parent before child)."""

    def __init__(self) -> None:
        self.held: dict[Level, str] = {}

    def check(self, level: Level, resource: str) -> None:
        for held_level, held in self.held.items():
            if level <= held_level:
                raise HierarchyViolation(
                    f"Cannot acquire {resource} {_lv(level)} while holding {held} {_lv(held_level)}"
                )

    def hold(self, level: Level, resource: str) -> None:
        self.held[level] = resource


def _lv(level: Level) -> str:
    return f"({level[0].name}, {level[1]})"


def level_of(resource: str) -> Level:
    """account:<id> sits at (ACCOUNT, id): accounts are ranked by their numeric id."""
    return LockLevel.ACCOUNT, int(resource.split(":")[1])


class WaitForGraph:
    """The document's DeadlockDetector (DP-7): who waits for whom; a cycle is a deadlock."""

    def __init__(self) -> None:
        self.waits: dict[str, set[str]] = {}

    def record_waiting(self, waiter: str, holder: str) -> None:
        self.waits.setdefault(waiter, set()).add(holder)

    def cycles(self) -> list[list[str]]:
        """Each cycle once, from its smallest member. A waiter queued behind a cycle is
        blocked by it but is not one of its members."""
        found: set[tuple[str, ...]] = set()
        done: set[str] = set()

        def walk(path: list[str]) -> None:
            for nxt in sorted(self.waits.get(path[-1], ())):
                if nxt in path:
                    cycle = path[path.index(nxt) :]
                    i = cycle.index(min(cycle))
                    found.add(tuple(cycle[i:] + cycle[:i]))
                elif nxt not in done:
                    walk([*path, nxt])
            done.add(path[-1])

        for start in sorted(self.waits):
            if start not in done:
                walk([start])
        return [list(c) for c in sorted(found)]
