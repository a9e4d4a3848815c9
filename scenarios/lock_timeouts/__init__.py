"""lock-timeouts: the code under test in lock_timeouts.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.lock_timeouts.claims import SCENARIO

__all__ = ["SCENARIO"]
