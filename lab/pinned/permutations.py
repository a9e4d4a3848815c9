"""Schedules as permutations: every interleaving of the sessions' steps (in each session's
order), how many there are, and whether a schedule starts with a given prefix."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


def interleavings(steps: Mapping[str, Sequence[str]]) -> Iterator[tuple[str, ...]]:
    """Every merge of the sessions' step lists that keeps each session's own order, in a
    stable order (the isolation tester's "all permutations" for a spec naming none)."""
    names = list(steps)

    def merge(pos: tuple[int, ...]) -> Iterator[tuple[str, ...]]:
        if all(p == len(steps[n]) for p, n in zip(pos, names, strict=True)):
            yield ()
            return
        for i, n in enumerate(names):
            if pos[i] < len(steps[n]):
                head = f"{n} {steps[n][pos[i]]}"
                nxt = (*pos[:i], pos[i] + 1, *pos[i + 1 :])
                for rest in merge(nxt):
                    yield (head, *rest)

    yield from merge(tuple(0 for _ in names))


def count_interleavings(steps: Mapping[str, Sequence[str]]) -> int:
    """The multinomial (sum n_i)! / prod(n_i!)."""
    import math

    total = math.factorial(sum(len(s) for s in steps.values()))
    for s in steps.values():
        total //= math.factorial(len(s))
    return total


def prefixed(schedule: Sequence[str], prefixes: Sequence[tuple[str, ...]]) -> bool:
    """Whether `schedule` starts with one of `prefixes` (known invalid beginnings)."""
    return any(tuple(schedule[: len(p)]) == p for p in prefixes)
