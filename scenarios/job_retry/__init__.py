"""job-retry: the code under test in job_retry.py, its claims and evidence in claims.py."""

from __future__ import annotations

from scenarios.job_retry.claims import SCENARIO
from scenarios.job_retry.job_retry import BACKOFF_UNIT_MS, HEALTHY_JOBS, MAX_ATTEMPTS, STUCK

__all__ = ["BACKOFF_UNIT_MS", "HEALTHY_JOBS", "MAX_ATTEMPTS", "SCENARIO", "STUCK"]
