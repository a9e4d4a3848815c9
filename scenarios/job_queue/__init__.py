"""job-queue: the code under test in job_queue.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.job_queue.claims import SCENARIO

__all__ = ["SCENARIO"]
