"""Write skew: two doctors each see a colleague on call and both go off call.

Symptom:    the rule "at least one doctor on call per shift" holds in every transaction's
            view, yet after two doctors ask to go off call at the same time nobody is on call.
Root cause: each transaction checks the invariant over several rows (count the doctors on
            call) and then updates a different row (its own). No row is written by both, so
            no row lock and no first-updater check sees a conflict: READ COMMITTED and
            REPEATABLE READ (snapshot isolation) both let the two commit.
Fix:        SERIALIZABLE (-p isolation=serializable, the case `serializable`): SSI sees the
            read-write dependency cycle and aborts one with 40001, to be retried. Or lock
            something both must lock: a representative row, the shift (fixed-lock-shift),
            or the checked rows themselves (fixed-for-update); the second then waits,
            re-reads and refuses. The shift's lock is a READ COMMITTED fix: at REPEATABLE
            READ the waiter's snapshot can predate the other's commit (`locklab explore`).
Published:  "cân nhắc SERIALIZABLE hoặc khoá một row đại diện" (consider SERIALIZABLE or
            lock a representative row); no numbers (PostgreSQL 17.11)
            — locking-concurrency-control.vi.txt, "Trade-offs".
See:        claim LC-31 in claims.py; expected/ has the schedules' transcripts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from lab.core.scenario import Check, Env
from lab.core.steps import Pinned, Session
from lab.errors import LabError

SHIFT = 1
DOCTORS = ("alice", "bob")  # s1 and s2; a load of n > 2 adds doctor3, doctor4, ...
INVARIANT = "at least one doctor on call"
CHECK = "SELECT name FROM doctors WHERE shift_id = $1 AND on_call"
LOCK_SHIFT = "SELECT id FROM shifts WHERE id = $1 FOR UPDATE"
OFF_CALL = "UPDATE doctors SET on_call = false WHERE name = $1"
OVERLAP_S = 5.0  # the mutant waits at most this long for every doctor to have checked


def doctor(i: int) -> str:
    return DOCTORS[i] if i < len(DOCTORS) else f"doctor{i + 1}"


def validate(n: int, p: Mapping[str, Any]) -> None:
    if n < 2:
        raise LabError("write-skew needs -n 2 or more: one doctor has no colleague to rely on")


async def schema(env: Env) -> None:
    await env.db.execute("CREATE TABLE shifts (id int PRIMARY KEY, day date NOT NULL)")
    await env.db.execute(
        "CREATE TABLE doctors (name text PRIMARY KEY,"
        " shift_id int NOT NULL REFERENCES shifts, on_call bool NOT NULL)"
    )


async def setup(env: Env) -> None:
    await env.db.execute("INSERT INTO shifts VALUES ($1, '2026-12-01')", SHIFT)
    await env.db.executemany(
        "INSERT INTO doctors VALUES ($1, $2, true)", [(doctor(i), SHIFT) for i in range(env.n)]
    )


# --- one doctor's request: check who is on call, then go off call; the variants lock ------


async def _go_off_call(
    env: Env, s: Session, lock: str = "", overlap: bool = False, isolation: str = ""
) -> str:
    async with s.transaction(isolation=isolation or env.params["isolation"]):
        if lock == "shift":  # the representative row both must lock
            await s.execute("lock", LOCK_SHIFT, SHIFT)
        on_call = await s.fetch("check", CHECK + (" FOR UPDATE" if lock == "rows" else ""), SHIFT)
        if len(on_call) < 2:
            return "refused"  # nobody else on call: stay
        if overlap and not s.pinned:  # pinned, the schedule decides the overlap
            await _everyone_checked(env)
        await s.execute("write", OFF_CALL, doctor(s.index))
    return "ok"


async def buggy(env: Env, s: Session) -> str:
    return await _go_off_call(env, s)


async def check_pause_write(env: Env, s: Session) -> str:
    """Not a variant: buggy that writes only once every doctor of the run has checked, so
    that under a load both check before either writes (the overlap, every run, however
    busy the machine), and at READ COMMITTED whatever -p isolation asks (SERIALIZABLE
    dropped): the code mutant the load invariant of the locks and of SERIALIZABLE is
    judged against (buggy's own overlaps only by chance)."""
    return await _go_off_call(env, s, overlap=True, isolation="read_committed")


async def _everyone_checked(env: Env) -> None:
    """Wait until every doctor of the run has checked (the run's sessions share its event
    loop); a doctor that failed before its check never comes, so at most OVERLAP_S."""
    checked = env.state.setdefault("checked", {"count": 0, "all": asyncio.Event()})
    checked["count"] += 1
    if checked["count"] >= env.n:
        checked["all"].set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(checked["all"].wait(), OVERLAP_S)


async def fixed_lock_shift(env: Env, s: Session) -> str:
    return await _go_off_call(env, s, lock="shift")


async def fixed_for_update(env: Env, s: Session) -> str:
    return await _go_off_call(env, s, lock="rows")


async def invariant(env: Env) -> list[Check]:
    on_call = await env.db.fetchval(
        "SELECT count(*) FROM doctors WHERE shift_id = $1 AND on_call", SHIFT
    )
    return [Check(INVARIANT, on_call >= 1, f"{on_call} of {env.n} on call")]


# --- pinned: each doctor's steps, and the order the document describes --------------------

S = ("check", "write", "commit")
PINNED = Pinned(
    code={
        "buggy": buggy,
        "fixed-lock-shift": fixed_lock_shift,
        "fixed-for-update": fixed_for_update,
    },
    steps={
        "buggy": {"s1": S, "s2": S},
        "fixed-lock-shift": {"s1": ("lock", *S), "s2": ("lock", *S)},
        "fixed-for-update": {"s1": S, "s2": S},
    },
    schedules={
        # both check before either writes: each sees two on call
        "buggy": {
            "both-check-first": (
                "s1 check",
                "s2 check",
                "s1 write",
                "s2 write",
                "s1 commit",
                "s2 commit",
            )
        },
        # s2 asks for the shift's lock while s1 holds it: it waits until s1 commits
        "fixed-lock-shift": {
            "both-check-first": (
                "s1 lock",
                "s1 check",
                "s2 lock",
                "s1 write",
                "s1 commit",
                "s2 check",
                "s2 write",
                "s2 commit",
            )
        },
        # s2's locking check waits on s1's row locks, then re-reads: bob alone is on call
        "fixed-for-update": {
            "both-check-first": (
                "s1 check",
                "s2 check",
                "s1 write",
                "s1 commit",
                "s2 write",
                "s2 commit",
            )
        },
    },
    isolation=("read_committed", "repeatable_read", "serializable"),
)
