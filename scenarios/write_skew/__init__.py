"""write-skew: the code under test in write_skew.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.write_skew.claims import SCENARIO

__all__ = ["SCENARIO"]
