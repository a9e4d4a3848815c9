"""deadlock-detector: the code under test in deadlock_detector.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.deadlock_detector.claims import SCENARIO

__all__ = ["SCENARIO"]
