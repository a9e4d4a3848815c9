"""advisory-pgbouncer: what the documents claim, how each claim is judged, and the assembly.

Every claim is judged on one run per variant through a real PgBouncer in transaction
mode: what the unlock returned and the WARNING the server sent with it, which server
backend each client ran on, and pg_locks' advisory rows after the job. LC-22 (re-entry)
is judged on a direct connection, in the buggy run.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Claim, Record, mutation
from lab.core.scenario import Defaults, declare
from scenarios.advisory_pgbouncer import advisory_pgbouncer as code

WARNING = "you don't own a lock of type ExclusiveLock"  # the server's, as the document quotes it


def _buggy_unlock(records: Mapping[str, Record]) -> tuple[bool, str]:
    ev = records["buggy"]["evidence"]
    outcomes = records["buggy"]["outcomes"]
    warned = any(WARNING in w for w in ev.get("unlock_warnings", []))
    return outcomes.get("unlock_false") == 1 and warned, (
        f"buggy: unlock {outcomes}, warnings {ev.get('unlock_warnings')}"
    )


def _inherited(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    ev = rec["evidence"]
    same = ev.get("job_server_pid") == ev.get("other_server_pid")
    return rec["outcomes"].get("inherited_lock") == 1 and same, (
        f"buggy: other client on server pid {ev.get('other_server_pid')} "
        f"(job's was {ev.get('job_server_pid')}): {rec['outcomes']}"
    )


def _leak(records: Mapping[str, Record]) -> tuple[bool, str]:
    after = records["buggy"]["evidence"].get("advisory_locks_after_job", [])
    return len(after) == 1, f"buggy: pg_locks advisory after the job: {after}"


def _xact_safe(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    after = rec["evidence"].get("advisory_locks_after_job", [])
    ok = rec["outcomes"] == {"released": 1, "lock_busy": 1} and not after
    return ok, f"fixed: {rec['outcomes']}, advisory locks after: {after}"


def _reentry_counts(records: Mapping[str, Record]) -> tuple[bool, str]:
    r = records["buggy"]["evidence"].get("session_lock_reentry", {})
    return r.get("held_after_one_unlock") is True and r.get("held_after_two_unlocks") is False, (
        f"lock twice: held after one unlock={r.get('held_after_one_unlock')}, "
        f"after two={r.get('held_after_two_unlocks')}"
    )


def _one_unlock_releases(rec: Record) -> None:
    """A lock that did not count re-entries: the first unlock released it."""
    rec["evidence"]["session_lock_reentry"]["held_after_one_unlock"] = False


CLAIMS = (
    Claim(
        "LC-22",
        "Session advisory locks count re-entries: lock twice, unlock twice",
        ("buggy",),
        _reentry_counts,
        published="lock hai lần thì phải unlock hai lần",
        # the server counts alike whatever the pooler: the counterfactual is a lock that does not
        counterfactual=mutation(
            "buggy", _one_unlock_releases, "PostgreSQL counts re-entries whatever the pooler"
        ),
    ),
    Claim(
        "LC-23",
        "Through transaction mode the unlock runs on another server connection, "
        "returns false with the warning",
        ("buggy",),
        _buggy_unlock,
        published=f"trả về false với warning {WARNING}",
    ),
    Claim(
        "LC-23",
        "Another client borrowing the server connection inherits the lock",
        ("buggy",),
        _inherited,
        published="client khác mượn connection sẽ thừa kế lock",
    ),
    Claim(
        "LC-23",
        "The lock stays held by the pooled server connection after the job",
        ("buggy",),
        _leak,
        published="Xem pg_locks WHERE locktype = 'advisory'",
    ),
    Claim(
        "LC-23",
        "Xact-level locks are safe behind transaction mode: held while the job "
        "runs, gone after COMMIT",
        ("fixed",),
        _xact_safe,
        published="sau pooler transaction mode, chỉ dùng xact-level",
    ),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed},
    outcomes=("released", "unlock_false", "lock_busy", "inherited_lock"),
    claims=CLAIMS,
    published={
        "buggy": f"unlock -> false, WARNING: {WARNING}; lock inherited",
        "fixed": "pg_advisory_xact_lock: released at COMMIT",
    },
    defaults=Defaults(n=3, run_timeout_s=60),
    uses=frozenset({"pg", "pgbouncer"}),
    sources=("DL", "LC"),
)
