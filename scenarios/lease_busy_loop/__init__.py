"""lease-busy-loop: the code under test and its story's steps in lease_busy_loop.py, its
claims in claims.py; the story's actions (shared with redlock) in
scenarios/lease_gc_pause/overlap.py."""

from __future__ import annotations

from scenarios.lease_busy_loop.claims import SCENARIO

__all__ = ["SCENARIO"]
