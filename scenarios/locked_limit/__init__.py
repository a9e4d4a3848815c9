"""locked-limit: the code under test in locked_limit.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.locked_limit.claims import SCENARIO

__all__ = ["SCENARIO"]
