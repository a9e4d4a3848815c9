"""checkout-deadlock: the code under test in checkout_deadlock.py, its claims in claims.py,
its transcripts in expected/."""

from __future__ import annotations

from scenarios.checkout_deadlock.claims import SCENARIO

__all__ = ["SCENARIO"]
