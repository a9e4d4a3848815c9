"""lost-update: the code under test in lost_update.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.lost_update.claims import SCENARIO

__all__ = ["SCENARIO"]
