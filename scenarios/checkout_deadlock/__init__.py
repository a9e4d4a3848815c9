"""checkout-deadlock: the code under test in checkout_deadlock.py, its claims in claims.py,
its transcripts in expected/."""

from __future__ import annotations

from scenarios.checkout_deadlock.checkout_deadlock import INITIAL_QTY, SKUS
from scenarios.checkout_deadlock.claims import SCENARIO

__all__ = ["INITIAL_QTY", "SCENARIO", "SKUS"]  # lab/load/bench.py seeds pgbench's table with them
