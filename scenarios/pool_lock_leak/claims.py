"""pool-lock-leak: what the documents claim, how each claim is judged, and the assembly.

Every claim is judged on one run per variant (the code in pool_lock_leak.py): the words
of pod-1's failing run, of pod-2's later runs and of the run after pod-1's restart, the
advisory locks pg_locks shows after the failure, and the same failing job on asyncpg's
default pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.core.claims import Claim, Record, on_mutant
from lab.core.scenario import Defaults, declare
from scenarios.pool_lock_leak import pool_lock_leak as code
from scenarios.pool_lock_leak.pool_lock_leak import FAILED, LATER_RUNS, RAN, SKIPPED

NO_RESET = "mutant-reset-dropped"  # buggy on asyncpg's default pool with a no-op reset


def _leak_of(records: Mapping[str, Record], variant: str) -> dict[str, Any]:
    return dict(records[variant]["evidence"]["leak"])


def _never_again(records: Mapping[str, Record]) -> tuple[bool, str]:
    lk = _leak_of(records, "buggy")
    held = (
        lk["first"] == FAILED
        and lk["locks_after_failure"] == [lk["pod1_pid"]]
        and lk["later"] == [SKIPPED] * LATER_RUNS
        and lk["after_restart"] == RAN
    )
    return held, (
        f"buggy: pod-1 run {lk['first']}; pg_locks advisory held by pid "
        f"{lk['locks_after_failure']} (pod-1's pooled backend {lk['pod1_pid']}); pod-2's "
        f"later runs {lk['later']}; after pod-1 restarts: {lk['after_restart']}"
    )


def _fixed_runs(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        lk = _leak_of(records, variant)
        held = lk["first"] == FAILED and not lk["locks_after_failure"]
        held = held and lk["later"] == [RAN] * LATER_RUNS
        return held, (
            f"{variant}: pod-1 run {lk['first']}; advisory locks after it "
            f"{lk['locks_after_failure']}; pod-2's later runs {lk['later']}"
        )

    how = "unlock in finally" if variant == "fixed" else "pg_try_advisory_xact_lock"
    return Claim(
        "LC-24",
        f"{variant} ({how}): the failed run leaves no lock; every later run runs",
        (variant,),
        check,
    )


def _asyncpg_hides(records: Mapping[str, Record]) -> tuple[bool, str]:
    d = records["buggy"]["evidence"]["asyncpg_default"]
    return d["first"] == FAILED and not d["locks_after_failure"], (
        f"buggy job on asyncpg's default pool: run {d['first']}, advisory locks after "
        f"release {d['locks_after_failure']} (its reset: {d.get('reset')})"
    )


CLAIMS = (
    Claim(
        "LC-24",
        "buggy (pool without reset): the job throws before its unlock; pg_locks shows the lock "
        "on the pooled backend; every later run on the other pod skips, until pod-1 restarts",
        ("buggy",),
        _never_again,
        published="job không bao giờ chạy lại cho tới khi restart. Xem pg_locks WHERE "
        "locktype = 'advisory'",
    ),
    # every variant runs asyncpg's pool, which resets: the counterfactual is buggy's job on
    # that pool given a reset that does nothing (a code mutant), where the lock stays
    on_mutant(
        Claim(
            "LC-24",
            "asyncpg's default pool reset (pg_advisory_unlock_all) releases the leaked lock: "
            "the leak needs a pool that does not reset, as node-postgres's and pgx's",
            ("buggy",),
            _asyncpg_hides,
        ),
        NO_RESET,
    ),
    _fixed_runs("fixed"),
    _fixed_runs("fixed-xact"),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed, "fixed-xact": code.fixed_xact},
    mutants={NO_RESET: code.reset_dropped},
    outcomes=(RAN, SKIPPED, FAILED),
    claims=CLAIMS,
    published={
        "buggy": "job không bao giờ chạy lại cho tới khi restart",
        "fixed": "unlock trong finally",
        "fixed-xact": "pg_advisory_xact_lock",
    },
    defaults=Defaults(n=1, run_timeout_s=60),
    sources=("LC",),
    script_connections=lambda n: 3,  # two pods' pools and asyncpg's default pool
)
