"""pool-lock-leak: the code under test in pool_lock_leak.py, its claims in claims.py."""

from __future__ import annotations

from scenarios.pool_lock_leak.claims import SCENARIO

__all__ = ["SCENARIO"]
