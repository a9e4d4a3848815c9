"""lock-wait-modes: the code under test in lock_wait_modes.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.lock_wait_modes.claims import SCENARIO

__all__ = ["SCENARIO"]
