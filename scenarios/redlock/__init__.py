"""redlock: the code under test and its story's steps in redlock.py, its claims in claims.py;
the story's actions (shared with lease-busy-loop) in scenarios/lease_gc_pause/overlap.py."""

from __future__ import annotations

from scenarios.redlock.claims import SCENARIO

__all__ = ["SCENARIO"]
