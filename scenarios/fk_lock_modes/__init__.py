"""fk-lock-modes: the code under test in fk_lock_modes.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.fk_lock_modes.claims import SCENARIO

__all__ = ["SCENARIO"]
