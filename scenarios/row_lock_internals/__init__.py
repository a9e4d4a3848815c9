"""row-lock-internals: the code under test in row_lock_internals.py, its claims in
claims.py."""

from __future__ import annotations

from scenarios.row_lock_internals.claims import SCENARIO

__all__ = ["SCENARIO"]
