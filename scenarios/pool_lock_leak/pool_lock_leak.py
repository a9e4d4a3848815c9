"""Pool lock leak: a session advisory lock left on a pooled connection by an exception.

Symptom:    after one failed run, a cron job guarded by pg_try_advisory_lock never runs
            again on any other connection or pod, with no error: every try-lock says "busy".
Root cause: the job throws between its lock and its unlock; the session lock belongs to the
            connection, and the connection goes back to the pool still holding it.
Fix:        unlock in `finally` (fixed), or pg_try_advisory_xact_lock inside a transaction
            (fixed-xact), released by COMMIT/ROLLBACK on every path.
Published:  "Advisory lock rò rỉ: session lock không unlock trong nhánh exception, connection
            trả về pool vẫn giữ lock, và job không bao giờ chạy lại cho tới khi restart. Xem
            pg_locks WHERE locktype = 'advisory'" — locking-concurrency-control.vi.txt
            ("Gotchas")
See:        claim LC-24 in claims.py (advisory-pgbouncer has the PgBouncer leak, LC-23). asyncpg's
            own pool hides this bug: on release it runs Connection.reset(), whose default query is
            `SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;`
            (Connection.get_reset_query, asyncpg 0.30+); every run measures that pool too and
            finds no lock left. node-postgres's and pgx's pools run no reset, so the pods'
            pools here are asyncpg pools given a `reset=` hook that does nothing, which is how
            those pools behave. Two pods, one pool each, as the document's cron runs: pod-1's
            run throws; pod-2's later runs get false while pg_locks shows the lock on pod-1's
            idle pooled backend, until pod-1 restarts (its pool closes); then pod-2 runs.
            pod-1 itself would re-enter the lock if its pool handed it the same connection
            (session locks count re-entries), so "never runs again" holds for every other
            connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from lab.core.scenario import Env

JOB_KEY = 7001  # the cron job's advisory key
LATER_RUNS = 3  # pod-2's runs after pod-1's failed one
LOCKS = """SELECT pid FROM pg_locks WHERE locktype = 'advisory'
AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
RAN = "ran"
SKIPPED = "skipped"
FAILED = "failed"


class JobFailed(Exception):
    """The job's work raised (the exception path under test)."""


async def _no_reset(conn: asyncpg.Connection) -> None:
    """node-postgres / pgx: a released connection goes back as it is (no session reset)."""


Reset = Callable[[asyncpg.Connection], Awaitable[None]]  # a pool's reset= hook


async def job(conn: asyncpg.Connection, variant: str, fail: bool) -> str:
    async def work() -> None:  # step work: the job's body; throws when asked to
        if fail:
            raise JobFailed("invoice provider down")

    if variant == "fixed-xact":
        async with conn.transaction():
            if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", JOB_KEY):
                return SKIPPED
            await work()
            return RAN
    if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", JOB_KEY):  # step lock
        return SKIPPED
    if variant == "buggy":
        await work()
        # step unlock: never reached when work() throws
        await conn.fetchval("SELECT pg_advisory_unlock($1)", JOB_KEY)
        return RAN
    try:  # fixed: the unlock on every path
        await work()
        return RAN
    finally:
        await conn.fetchval("SELECT pg_advisory_unlock($1)", JOB_KEY)


async def _run_job(env: Env, pool: asyncpg.Pool, who: str, variant: str, fail: bool = False) -> str:
    async with pool.acquire() as pooled:
        conn: asyncpg.Connection = pooled  # type: ignore[assignment]
        pid = conn.get_server_pid()
        try:
            word = await job(conn, variant, fail)
        except JobFailed:
            word = FAILED
    env.trace(who, word, pid=pid, locks=[r["pid"] for r in await env.db.fetch(LOCKS)])
    return word


async def _leak(env: Env, variant: str) -> dict[str, Any]:
    """LC-24: pod-1 fails once; pod-2 runs later; pod-1 restarts; pod-2 runs again."""
    pod1 = await asyncpg.create_pool(env.dsn, min_size=1, max_size=1, reset=_no_reset)
    pod2 = await asyncpg.create_pool(env.dsn, min_size=1, max_size=1, reset=_no_reset)
    try:
        first = await _run_job(env, pod1, "pod-1", variant, fail=True)
        async with pod1.acquire() as c:
            pod1_pid = c.get_server_pid()
        held = [r["pid"] for r in await env.db.fetch(LOCKS)]  # step observe
        later = [await _run_job(env, pod2, "pod-2", variant) for _ in range(LATER_RUNS)]
        await pod1.close()  # step restart: pod-1's connection closes
        after_restart = await _run_job(env, pod2, "pod-2", variant)
    finally:
        pod1.terminate()
        pod2.terminate()
    return {
        "first": first,
        "pod1_pid": pod1_pid,
        "locks_after_failure": held,
        "later": later,
        "after_restart": after_restart,
    }


async def _asyncpg_default(env: Env, variant: str, reset: Reset | None) -> dict[str, Any]:
    """The same failing job on asyncpg's default pool: its reset (`reset` None: asyncpg's
    own) unlocks all on release."""
    pool = await asyncpg.create_pool(env.dsn, min_size=1, max_size=1, reset=reset)
    try:
        first = await _run_job(env, pool, "asyncpg-default", variant, fail=True)
        held = [r["pid"] for r in await env.db.fetch(LOCKS)]
    finally:
        await pool.close()
    how = "asyncpg's own: pg_advisory_unlock_all()" if reset is None else "one that does nothing"
    return {"first": first, "locks_after_failure": held, "reset": how}


async def buggy(env: Env) -> None:
    await _run(env, "buggy")


async def fixed(env: Env) -> None:
    await _run(env, "fixed")


async def fixed_xact(env: Env) -> None:
    await _run(env, "fixed-xact")


async def reset_dropped(env: Env) -> None:
    """Not a variant: buggy with asyncpg's default pool given a reset that does nothing."""
    await _run(env, "buggy", reset=_no_reset)


async def _run(env: Env, variant: str, reset: Reset | None = None) -> None:
    """`variant`'s job (job() applies its fix) on the pods' pools, then on asyncpg's
    default pool, whose reset is asyncpg's own unless `reset` is given (the mutant's)."""
    leak = await _leak(env, variant)
    for word in (leak["first"], *leak["later"], leak["after_restart"]):
        env.outcome(word)
    default = await _asyncpg_default(env, variant, reset)
    env.extra_evidence.update(leak=leak, asyncpg_default=default)
