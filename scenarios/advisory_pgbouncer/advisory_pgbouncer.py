"""Advisory lock behind PgBouncer transaction mode: the unlock lands on another connection.

Symptom:    a cron job guarded by pg_advisory_lock() through PgBouncer never runs again, or
            two pods run it at once; the unlock returned false with a WARNING nobody read.
Root cause: a session advisory lock belongs to the *server* connection. In transaction
            mode every transaction of a client may run on a different server connection:
            the lock stays on the first one after the statement ends, the unlock runs on
            another ("you don't own a lock of type ExclusiveLock") and returns false, and
            whichever client borrows the first connection next "inherits" the lock.
Fix:        pg_advisory_xact_lock() / pg_try_advisory_xact_lock() inside a transaction:
            released by COMMIT/ROLLBACK on the connection that took it, whatever the pooler.
Published:  "lệnh unlock của bạn chạy trên connection khác và trả về false với warning you
            don't own a lock of type ExclusiveLock"; "client khác mượn connection sẽ thừa kế
            lock"; leaks are visible in pg_locks WHERE locktype = 'advisory'
            — locking-concurrency-control.vi.txt (advisory locks, pitfalls);
            deadlock-distributed-lock-cron.vi.txt (edge cases: advisory lock + PgBouncer)
See:        LC-22, LC-23 in claims.py (LC-24, the leak in the application's own pool, is in
            pool-lock-leak). PgBouncer runs with server_round_robin = 0 (LIFO):
            a freed server connection is the next one handed out, which makes the hand-over
            below deterministic rather than lucky.
"""

from __future__ import annotations

from typing import Any

from lab.core.scenario import Check, Env

JOB_KEY = "job:daily-invoice"


async def _advisory_locks(env: Env) -> list[dict[str, Any]]:
    """Advisory locks held on the run's database right now, with the holding backend."""
    rows = await env.db.fetch(
        """
        SELECT l.pid, l.mode, l.granted, l.objid
        FROM pg_locks l JOIN pg_database d ON d.oid = l.database
        WHERE l.locktype = 'advisory' AND d.datname = current_database()
        ORDER BY l.pid
        """
    )
    return [dict(r) for r in rows]


async def _reentry(env: Env) -> dict[str, bool]:
    """LC-22 on a direct connection: a session lock taken twice needs two unlocks."""
    conn = await env.connect()
    try:
        key = await conn.fetchval("SELECT hashtext($1)", JOB_KEY + ":reentry")
        await conn.execute("SELECT pg_advisory_lock($1), pg_advisory_lock($1)", key)
        await conn.fetchval("SELECT pg_advisory_unlock($1)", key)
        held_after_one = bool(await _advisory_locks(env))
        await conn.fetchval("SELECT pg_advisory_unlock($1)", key)
        held_after_two = bool(await _advisory_locks(env))
    finally:
        await conn.close()
    return {"held_after_one_unlock": held_after_one, "held_after_two_unlocks": held_after_two}


async def _run(env: Env, xact: bool) -> None:
    env.extra_evidence["session_lock_reentry"] = await _reentry(env)
    job = await env.connect_via("transaction")
    other = await env.connect_via("transaction")
    nxt = await env.connect_via("transaction")
    warnings: list[str] = []
    job.add_log_listener(lambda _c, msg: warnings.append(str(msg.message)))
    try:
        key = await job.fetchval("SELECT hashtext($1)", JOB_KEY)
        job_tx = job.transaction()
        if xact:
            await job_tx.start()
            got = await job.fetchval("SELECT pg_try_advisory_xact_lock($1)", key)
        else:
            got = await job.fetchval("SELECT pg_try_advisory_lock($1)", key)
        job_pid = await job.fetchval("SELECT pg_backend_pid()")
        env.trace("job", "lock", got=got, scope="xact" if xact else "session", server_pid=job_pid)

        # Another client of the pool opens a transaction and asks for the same lock.
        async with other.transaction():
            other_pid = await other.fetchval("SELECT pg_backend_pid()")
            inherited = await other.fetchval("SELECT pg_try_advisory_lock($1)", key)
            env.trace("other", "try lock", got=inherited, server_pid=other_pid)
            if inherited:
                await other.fetchval("SELECT pg_advisory_unlock($1)", key)
            env.outcome("inherited_lock" if inherited else "lock_busy")

            # The job finishes its work and releases, while `other` still holds a server.
            if xact:
                await job_tx.commit()
                released = True
                env.trace("job", "commit releases the xact lock", server_pid=job_pid)
            else:
                released = await job.fetchval("SELECT pg_advisory_unlock($1)", key)
                unlock_pid = await job.fetchval("SELECT pg_backend_pid()")
                env.trace(
                    "job", "unlock", result=released, server_pid=unlock_pid, warnings=warnings
                )
            env.outcome("released" if released else "unlock_false")

        after = await _advisory_locks(env)
        env.trace("observer", "pg_locks advisory after the job", locks=after)
        # The next run of the job, later, through the same pool.
        if xact:
            async with nxt.transaction():
                again = await nxt.fetchval("SELECT pg_try_advisory_xact_lock($1)", key)
        else:
            again = await nxt.fetchval("SELECT pg_try_advisory_lock($1)", key)
            if again:
                await nxt.fetchval("SELECT pg_advisory_unlock($1)", key)
        env.trace("next", "try lock", got=again)
        env.extra_evidence.update(
            {
                "job_server_pid": job_pid,
                "other_server_pid": other_pid,
                "unlock_warnings": warnings,
                "advisory_locks_after_job": after,
            }
        )
    finally:
        for conn in (job, other, nxt):
            conn.terminate()


async def buggy(env: Env) -> None:
    await _run(env, xact=False)


async def fixed(env: Env) -> None:
    await _run(env, xact=True)  # the whole fix: the lock's scope is the transaction


async def invariant(env: Env) -> list[Check]:
    """No advisory lock may outlive the job that took it."""
    after = env.extra_evidence.get("advisory_locks_after_job", [])
    return [
        Check(
            "no advisory lock outlives the job", not after, f"advisory locks after the job: {after}"
        )
    ]
