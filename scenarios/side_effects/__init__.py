"""side-effects: the code under test in side_effects.py, its claims in claims.py; the
provider it calls is the lab's (lab/kit/provider.py)."""

from __future__ import annotations

from scenarios.side_effects.claims import SCENARIO

__all__ = ["SCENARIO"]
