"""Sampled orders, for actors whose replays diverge: PCT's random priorities.

Explore is stateless: it replays a list of choices from the start. When an actor sends
other statements on a replay of the same prefix (a timer, a poll, `SKIP LOCKED`, a random
token), no list of choices names the same order twice, so the orders cannot be enumerated.
Explore then samples orders instead, and says it did: "sampled N orders", never that
every order ran.

Each sampled order follows PCT, probabilistic concurrency testing (Burckhardt, Kothari,
Musuvathi and Nagarakatte, ASPLOS 2010). Every session gets a random priority when its
first statement is held; at each point the held statement of the session with the highest
priority goes. At `depth - 1` change points, drawn at random among the first `length`
points (the longest order seen so far), the session that would go drops below every
other, so another one goes there: each order has up to `depth - 1` forced switches on top
of those its priorities give. The paper bounds the chance that one order hits a bug of
depth d among n threads and k steps from below by 1 / (n * k ** (d - 1)); this is its
scheme on statements. The seed makes a sampling repeatable as far as the actors are.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from lab.gate.order import Choose, Decision
from lab.pinned.footprint import Footprint

DEPTH = 3  # PCT's bug depth: two change points per order
SAMPLES = 50  # orders sampled when --max does not say


def session_of(label: str) -> str:
    """The session a held statement's label names ('a2.1: UPDATE ...' -> 'a2.1')."""
    return label.partition(":")[0]


@dataclass
class Pct:
    """One sampled order's priorities and change points (see the module doc)."""

    rng: random.Random
    changes: set[int]  # the points where the session that goes drops below every other
    priority: dict[str, float] = field(default_factory=dict)
    lowest: float = 0.0

    @classmethod
    def drawn(cls, rng: random.Random, length: int, depth: int = DEPTH) -> Pct:
        """A new order's change points, among the first `length` points."""
        points = range(max(length, 1))
        return cls(rng, set(rng.sample(points, min(depth - 1, len(points)))))

    def choose(self, depth: int, decision: Decision, steps: Sequence[Footprint]) -> int:
        """The held statement of the session with the highest priority."""
        sessions = [session_of(label) for label in decision.candidates]
        for name in sessions:
            if name not in self.priority:
                self.priority[name] = 1.0 + self.rng.random()
        if depth in self.changes:  # the session that would go drops: another goes here
            self.lowest -= 1.0
            self.priority[max(sessions, key=self.priority.__getitem__)] = self.lowest
        return max(range(len(sessions)), key=lambda k: self.priority[sessions[k]])


def sampler(rng: random.Random, length: int) -> Choose:
    """A chooser for one sampled order."""
    return Pct.drawn(rng, length).choose
