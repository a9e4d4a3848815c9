"""upsert-idempotency: the code under test in upsert_idempotency.py, its claims in claims.py,
its transcripts in expected/."""

from __future__ import annotations

from scenarios.upsert_idempotency.claims import SCENARIO
from scenarios.upsert_idempotency.upsert_idempotency import KEY

__all__ = ["KEY", "SCENARIO"]  # imported from the old module path, kept
