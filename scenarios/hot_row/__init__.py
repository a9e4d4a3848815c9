"""hot-row: the code under test in hot_row.py, its claims in claims.py, its transcripts in
expected/."""

from __future__ import annotations

from scenarios.hot_row.claims import SCENARIO

__all__ = ["SCENARIO"]
