"""deadlock-traffic: the code under test in deadlock_traffic.py, its claims in claims.py."""

from __future__ import annotations

from scenarios.deadlock_traffic.claims import SCENARIO

__all__ = ["SCENARIO"]
