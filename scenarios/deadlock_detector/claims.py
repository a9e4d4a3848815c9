"""deadlock-detector: what the documents claim, how each claim is judged, and the assembly.

Every claim is judged on one run per variant (`run` in deadlock_detector.py): the ends and
times of the variant's sessions pinned to the schedule `cross`, at two lock_timeouts
(DP-8), and with the later waiter given the shorter deadlock_timeout (LC-35). The same
sessions are what `locklab trace` / `explore deadlock-detector` run (at lock_timeout 5 s,
the lab's deadlock_timeout).
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Claim, Record
from lab.core.scenario import Defaults, Param, declare
from scenarios.deadlock_detector import deadlock_detector as code
from scenarios.deadlock_detector.deadlock_detector import DEADLOCK_TIMEOUT_MS, SHORT_DT_MS


def _dp8(lock_timeout_ms: int, sqlstate: str, after_ms: int) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        p = next(
            (
                x
                for x in records["buggy"]["evidence"]["dp8"]
                if x["lock_timeout_ms"] == lock_timeout_ms
            ),
            None,
        )
        if p is None:
            return None
        t = p["after_ms"][0]  # s1 waited first: its timer (deadlock or lock) fires first
        # Which timer fired is the error code (55P03 means lock_timeout came before the
        # detector, 40P01 the reverse); time is judged from below only: a timer never fires
        # early, but a loaded machine may report it late by any amount.
        held = p["ends"][0] == sqlstate and t is not None and t >= after_ms
        held = held and (sqlstate != "40P01" or p["ends"][1] == "ok")  # the detector frees s2
        return held, f"buggy, lock_timeout {lock_timeout_ms} ms: ends {p['ends']}, s1 after {t} ms"

    return Claim(
        "DP-8",
        f"lock_timeout {lock_timeout_ms} ms, deadlock_timeout {DEADLOCK_TIMEOUT_MS} ms: the "
        f"first waiter gets {sqlstate}, not before {after_ms} ms"
        + (", the other commits" if sqlstate == "40P01" else ""),
        ("buggy",),
        check,
        published="SET lock_timeout = '5s' -- to prevent permanent deadlock"
        if lock_timeout_ms == 5000
        else "",
    )


def _victim(records: Mapping[str, Record]) -> tuple[bool, str]:
    ev = records["buggy"]["evidence"]
    trials = ev["victims"]
    won = [p["ends"] == ["ok", "40P01"] for p in trials]
    times = [t for p in trials if (t := p["after_ms"][1]) is not None]  # None: no victim
    held = bool(trials) and all(won) and ev["superuser"]
    return held, (
        f"buggy: the later waiter (deadlock_timeout {SHORT_DT_MS} ms) was the victim in "
        f"{sum(won)}/{len(trials)} trials, after {min(times, default=0)}..{max(times, default=0)}"
        f" ms of its wait; the first waiter ({DEADLOCK_TIMEOUT_MS} ms) committed; superuser="
        f"{ev['superuser']}"
    )


def _no_errors(records: Mapping[str, Record]) -> tuple[bool, str]:
    out = records["fixed"]["outcomes"]
    return set(out) == {"ok"}, f"fixed: every session of every pair: {out}"


CLAIMS = (
    _dp8(5000, "40P01", DEADLOCK_TIMEOUT_MS),
    _dp8(500, "55P03", 500),
    Claim(
        "LC-35",
        "The victim is the session whose wait ran the detector: the later waiter, given the "
        "shorter deadlock_timeout, is the victim in every trial",
        ("buggy",),
        _victim,
        published="bên nào bị chọn là khó đoán ... Thường đó là bên chạy bộ dò",
    ),
    Claim(
        "DP-8",
        "fixed (one lock order): no 40P01 and no 55P03 at any setting",
        ("fixed",),
        _no_errors,
    ),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.run, "fixed": code.run},  # each runs its own pinned pair
    outcomes=("ok", "40P01", "55P03"),
    claims=CLAIMS,
    published={
        "buggy": "SET lock_timeout = '5s' to prevent permanent deadlock",
        "fixed": "one lock order: no cycle",
    },
    defaults=Defaults(n=2, run_timeout_s=120),
    params={
        "victim_trials": Param(10, "LC-35 pairs, the later waiter given the shorter timeout"),
    },
    sources=("DP", "LC"),
    quick={"victim_trials": 4},
    script_connections=lambda n: 2,
)
