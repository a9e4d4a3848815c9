"""cron-rerun: the code under test in cron_rerun.py, one pod's process in pod.py, a trial's
race, crash and retry in choreography.py and their summary in trials.py, the pinned stories
in schedules.py, its claims in claims.py (rerun.py, login.py)."""

from __future__ import annotations

from scenarios.cron_rerun.claims import SCENARIO
from scenarios.cron_rerun.login import SLOW_LOGIN_MS, SLOW_LOGIN_NEEDED, SLOW_LOGIN_TRIALS

__all__ = ["SCENARIO", "SLOW_LOGIN_MS", "SLOW_LOGIN_NEEDED", "SLOW_LOGIN_TRIALS"]
