"""update-lock-order: the code under test in update_lock_order.py, its claims in claims.py,
its transcripts in expected/."""

from __future__ import annotations

from scenarios.update_lock_order.claims import SCENARIO

__all__ = ["SCENARIO"]
