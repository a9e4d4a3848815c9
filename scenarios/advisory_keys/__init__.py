"""advisory-keys: the code under test in advisory_keys.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.advisory_keys.claims import SCENARIO

__all__ = ["SCENARIO"]
