"""redlock: the code under test in redlock.py, its claims in claims.py; the steps
(shared with lease-busy-loop) in scenarios/_paused_holder.py."""

from __future__ import annotations

from scenarios.redlock.claims import SCENARIO

__all__ = ["SCENARIO"]
