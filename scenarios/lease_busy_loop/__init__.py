"""lease-busy-loop: the code under test in lease_busy_loop.py, its claims in claims.py; the steps
(shared with redlock) in scenarios/_paused_holder.py."""

from __future__ import annotations

from scenarios.lease_busy_loop.claims import SCENARIO

__all__ = ["SCENARIO"]
