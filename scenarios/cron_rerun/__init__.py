"""cron-rerun: the code under test in cron_rerun.py, one pod's process in pod.py, the race,
crash and retry in choreography.py, its claims in claims.py."""

from __future__ import annotations

from scenarios.cron_rerun.claims import (
    SCENARIO,
    SLOW_LOGIN_MS,
    SLOW_LOGIN_NEEDED,
    SLOW_LOGIN_TRIALS,
)

__all__ = ["SCENARIO", "SLOW_LOGIN_MS", "SLOW_LOGIN_NEEDED", "SLOW_LOGIN_TRIALS"]
