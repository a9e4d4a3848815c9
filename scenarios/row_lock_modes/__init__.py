"""row-lock-modes: the code under test in row_lock_modes.py, its claims in claims.py."""

from __future__ import annotations

from scenarios.row_lock_modes.claims import SCENARIO

__all__ = ["SCENARIO"]
