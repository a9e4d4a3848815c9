"""Who blocks whom on a PostgreSQL server, from pg_blocking_pids(): `locklab locks` and the
lab's own blocking evidence (lab/load/evidence.py) read it through the one function here.

Read-only and without superuser: pg_stat_activity, pg_locks and pg_blocking_pids() are
readable by any role; the *query text* of other users' sessions is shown only to roles
with pg_read_all_stats (granted by pg_monitor), else PostgreSQL prints
``<insufficient privilege>``. `locklab locks` opens its own session with a
statement_timeout and lock_timeout, in a read-only transaction, so pointing it at a
staging server cannot block or change anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import asyncpg

# The session `locklab locks` opens: bounded, read-only, named in pg_stat_activity.
SAFE_SETTINGS = {
    "statement_timeout": "5000",
    "lock_timeout": "1000",
    "idle_in_transaction_session_timeout": "10000",
    "default_transaction_read_only": "on",
    "application_name": "locklab locks",
}
ROLE_NOTE = "other users' query text needs pg_read_all_stats (or pg_monitor)"

_ACTIVITY = """
WITH s AS (
    SELECT pid, usename, datname, application_name, state, wait_event_type, wait_event,
           query, xact_start, pg_blocking_pids(pid) AS blocked_by
    FROM pg_stat_activity
    WHERE pid <> pg_backend_pid() AND ($1::text IS NULL OR datname = $1)
)
SELECT s.*, clock_timestamp() AS now
FROM s
WHERE cardinality(s.blocked_by) > 0
   OR s.pid IN (SELECT unnest(blocked_by) FROM s)
ORDER BY s.pid
"""

_LOCKS = """
SELECT pid, locktype, mode, granted, database, relation,
       CASE WHEN relation IS NOT NULL AND database = (SELECT oid FROM pg_database
                                                      WHERE datname = current_database())
            THEN relation::regclass::text END AS relname,
       page, tuple, virtualxid, transactionid::text AS transactionid,
       classid, objid, objsubid, waitstart
FROM pg_locks
WHERE pid = ANY($1::int[])
"""

_IDENTITY = (
    "locktype",
    "database",
    "relation",
    "page",
    "tuple",
    "virtualxid",
    "transactionid",
    "classid",
    "objid",
    "objsubid",
)


@dataclass
class Holder:
    """A session pg_blocking_pids() names, and its lock on what the waiter wants."""

    pid: int
    mode: str  # "" when it holds nothing on that object (e.g. a parallel worker's leader)
    granted: bool  # False: it is queued ahead of the waiter for a conflicting mode


@dataclass
class Session:
    """A session in the blocking tree: a waiter, a root, or both."""

    pid: int
    user: str
    database: str
    application: str
    state: str
    wait_event_type: str | None
    wait_event: str | None
    query: str
    blocked_by: list[int]
    wait_s: float | None = None  # since it began waiting for its lock (pg_locks.waitstart)
    xact_s: float | None = None  # age of its transaction
    wants: str = ""  # "ShareLock on transaction 7421", "AccessExclusiveLock on relation t"
    wants_mode: str = ""
    holders: list[Holder] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _target(lock: asyncpg.Record) -> str:
    kind = lock["locktype"]
    if kind == "relation":
        return f"relation {lock['relname'] or lock['relation']}"
    if kind == "tuple":
        return f"tuple ({lock['page']},{lock['tuple']}) of {lock['relname'] or lock['relation']}"
    if kind == "transactionid":
        return f"transaction {lock['transactionid']}"
    if kind == "virtualxid":
        return f"virtual transaction {lock['virtualxid']}"
    if kind == "advisory":
        return f"advisory lock {lock['classid']}:{lock['objid']}"
    return f"{kind} {lock['objid'] or lock['relation'] or ''}".strip()


async def blocking_sessions(conn: asyncpg.Connection, database: str | None = None) -> list[Session]:
    """Every session that waits for a lock or holds one somebody waits for (in `database`,
    or the whole server), by pid, with what each waiter wants and who has it."""
    rows = await conn.fetch(_ACTIVITY, database)
    if not rows:
        return []
    locks = await conn.fetch(_LOCKS, [r["pid"] for r in rows])
    by_pid: dict[int, list[asyncpg.Record]] = {}
    for lock in locks:
        by_pid.setdefault(lock["pid"], []).append(lock)
    out = []
    for r in rows:
        now = r["now"]
        s = Session(
            pid=r["pid"],
            user=r["usename"] or "",
            database=r["datname"] or "",
            application=r["application_name"] or "",
            state=r["state"] or "",
            wait_event_type=r["wait_event_type"],
            wait_event=r["wait_event"],
            query=r["query"] or "",
            blocked_by=list(r["blocked_by"]),
            xact_s=(now - r["xact_start"]).total_seconds() if r["xact_start"] else None,
        )
        waiting = next((lk for lk in by_pid.get(s.pid, []) if not lk["granted"]), None)
        if waiting is not None:
            s.wants_mode = waiting["mode"]
            s.wants = f"{waiting['mode']} on {_target(waiting)}"
            if waiting["waitstart"] is not None:
                s.wait_s = max(0.0, (now - waiting["waitstart"]).total_seconds())
            same = tuple(waiting[k] for k in _IDENTITY)
            for b in s.blocked_by:
                theirs = [lk for lk in by_pid.get(b, []) if tuple(lk[k] for k in _IDENTITY) == same]
                held = next((lk for lk in theirs if lk["granted"]), None)
                theirs_lock = held or (theirs[0] if theirs else None)
                mode = theirs_lock["mode"] if theirs_lock else ""
                s.holders.append(Holder(b, mode, bool(theirs_lock and theirs_lock["granted"])))
        else:
            s.holders = [Holder(b, "", False) for b in s.blocked_by]
        out.append(s)
    return out


async def snapshot(dsn: str, database: str | None = None) -> list[Session]:
    """One look at a server, on a session of its own that cannot block or write anything."""
    conn = await asyncpg.connect(dsn, timeout=10, server_settings=SAFE_SETTINGS)
    try:
        async with conn.transaction(readonly=True):
            return await blocking_sessions(conn, database)
    finally:
        await conn.close()


def roots(sessions: Sequence[Session]) -> list[Session]:
    """Sessions that block others and wait for nobody: where to look first."""
    return [s for s in sessions if not s.blocked_by]


def to_json(sessions: Sequence[Session]) -> str:
    return json.dumps(
        {"roots": [s.pid for s in roots(sessions)], "sessions": [s.to_json() for s in sessions]}
    )
