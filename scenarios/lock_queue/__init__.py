"""lock-queue: the code under test in lock_queue.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.lock_queue.claims import SCENARIO

__all__ = ["SCENARIO"]
