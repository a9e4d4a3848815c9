"""lock-order-prevention: the code under test in lock_order_prevention.py (the Redis lock in
locks.py, the document's checkers in checkers.py, the lab's detector in detector.py), its
claims in claims.py, its transcripts in expected/."""

from __future__ import annotations

from scenarios.lock_order_prevention.claims import SCENARIO

__all__ = ["SCENARIO"]
