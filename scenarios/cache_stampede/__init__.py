"""cache-stampede: the code under test in cache_stampede.py, its claims in claims.py, the
wait window's observer in wait_window.py."""

from __future__ import annotations

from scenarios.cache_stampede.claims import SCENARIO

__all__ = ["SCENARIO"]
