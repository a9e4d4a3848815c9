"""redis-failover: the code under test in redis_failover.py, its claims in claims.py."""

from __future__ import annotations

from scenarios.redis_failover.claims import SCENARIO

__all__ = ["SCENARIO"]
