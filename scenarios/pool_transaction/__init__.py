"""pool-transaction: the code under test in pool_transaction.py, its claims in claims.py."""

from __future__ import annotations

from scenarios.pool_transaction.claims import SCENARIO

__all__ = ["SCENARIO"]
