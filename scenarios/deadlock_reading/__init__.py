"""deadlock-reading: the code under test in deadlock_reading.py, its claims and the
documents' monitoring queries in claims.py."""

from __future__ import annotations

from scenarios.deadlock_reading.claims import SCENARIO

__all__ = ["SCENARIO"]
