"""money-transfer: the code under test in money_transfer.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.money_transfer.claims import SCENARIO
from scenarios.money_transfer.money_transfer import INITIAL_BALANCE

__all__ = ["INITIAL_BALANCE", "SCENARIO"]  # imported from the old module path, kept
