"""`locklab locks`: the blocking tree of a real blocked session, as text, JSON and evidence."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from lab.load.evidence import blocking_tree
from lab.load.locks import Holder, snapshot
from lab.pinned.interleave import task_or_blocked

ROOT = Path(__file__).resolve().parent.parent
HOLD_SQL = "UPDATE stock SET qty = qty - 1 WHERE sku = 'A-1'"
WAIT_SQL = "UPDATE stock SET qty = qty - 2 WHERE sku = 'A-1'"


@dataclass
class Blocked:
    dsn: str
    database: str
    holder: int
    waiter: int


@pytest.fixture
async def blocked(locklab_pg_dsn: str) -> AsyncIterator[Blocked]:
    """A holder with a row lock in an open transaction, and a waiter the server reports
    as blocked on it (waited for through pg_blocking_pids, not slept)."""
    holder = await asyncpg.connect(locklab_pg_dsn)
    waiter = await asyncpg.connect(locklab_pg_dsn)
    observer = await asyncpg.connect(locklab_pg_dsn)
    try:
        await holder.execute("CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL)")
        await holder.execute("INSERT INTO stock VALUES ('A-1', 10)")
        await holder.execute("BEGIN")
        await holder.execute(HOLD_SQL)
        task = asyncio.ensure_future(waiter.execute(WAIT_SQL))
        blockers = await task_or_blocked(observer, waiter.get_server_pid(), task, what="waiter")
        assert blockers == [holder.get_server_pid()]
        database = urllib.parse.urlsplit(locklab_pg_dsn).path.lstrip("/")
        yield Blocked(locklab_pg_dsn, database, holder.get_server_pid(), waiter.get_server_pid())
        await holder.execute("ROLLBACK")
        assert await task == "UPDATE 1"
    finally:
        for conn in (holder, waiter, observer):
            await conn.close()


async def test_snapshot_names_waiter_lock_and_holder(blocked: Blocked) -> None:
    """The waiter wants ShareLock on the holder's transaction, which the holder has."""
    sessions = {s.pid: s for s in await snapshot(blocked.dsn, blocked.database)}
    assert set(sessions) == {blocked.holder, blocked.waiter}
    w, h = sessions[blocked.waiter], sessions[blocked.holder]
    assert w.blocked_by == [blocked.holder]
    assert w.query == WAIT_SQL and w.state == "active"
    assert (w.wait_event_type, w.wait_event) == ("Lock", "transactionid")
    assert w.wants_mode == "ShareLock" and w.wants.startswith("ShareLock on transaction ")
    assert w.holders == [Holder(blocked.holder, "ExclusiveLock", True)]
    assert w.wait_s is not None and 0 <= w.wait_s < 60
    assert h.blocked_by == [] and h.state == "idle in transaction" and h.query == HOLD_SQL


async def test_lab_evidence_is_the_same_tree(blocked: Blocked) -> None:
    """lab/load/evidence.py's blocking_tree reads the same function: same pids, blockers, holders."""
    conn = await asyncpg.connect(blocked.dsn)
    try:
        tree = {r["pid"]: r for r in await blocking_tree(conn, blocked.database)}
    finally:
        await conn.close()
    assert tree[blocked.waiter]["blocked_by"] == [blocked.holder]
    assert tree[blocked.waiter]["holders"] == [
        {"pid": blocked.holder, "mode": "ExclusiveLock", "granted": True}
    ]
    assert tree[blocked.holder]["blocked_by"] == []


def _locklab(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "lab.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )


async def test_cli_json_and_text(blocked: Blocked) -> None:
    """`locklab locks --json` and the text tree show the root and its waiter."""
    proc = await asyncio.to_thread(_locklab, "locks", "--pg-dsn", blocked.dsn, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    mine = {s["pid"]: s for s in doc["sessions"] if s["database"] == blocked.database}
    assert mine[blocked.waiter]["holders"] == [
        {"pid": blocked.holder, "mode": "ExclusiveLock", "granted": True}
    ]
    assert blocked.holder in doc["roots"]
    proc = await asyncio.to_thread(
        _locklab, "locks", "--pg-dsn", blocked.dsn, "--database", blocked.database
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 waiting, 1 root(s): " + str(blocked.holder) in proc.stdout
    assert f"{blocked.waiter} " in proc.stdout and "wants ShareLock on transaction" in proc.stdout
    assert f"; {blocked.holder} holds ExclusiveLock" in proc.stdout


async def test_plain_role_sees_the_tree_pg_read_all_stats_sees_queries(blocked: Blocked) -> None:
    """No superuser needed: a plain login role sees who blocks whom; the query text of
    others' sessions needs pg_read_all_stats."""
    role, password = f"locklab_watch_{secrets.token_hex(4)}", secrets.token_hex(12)
    admin = await asyncpg.connect(blocked.dsn)
    parts = urllib.parse.urlsplit(blocked.dsn)
    dsn = urllib.parse.urlunsplit(
        parts._replace(netloc=f"{role}:{password}@{parts.hostname}:{parts.port}")
    )
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        sessions = {s.pid: s for s in await snapshot(dsn, blocked.database)}
        assert sessions[blocked.waiter].blocked_by == [blocked.holder]
        assert sessions[blocked.waiter].query == "<insufficient privilege>"
        await admin.execute(f"GRANT pg_read_all_stats TO {role}")
        sessions = {s.pid: s for s in await snapshot(dsn, blocked.database)}
        assert sessions[blocked.waiter].query == WAIT_SQL
        assert sessions[blocked.waiter].holders == [Holder(blocked.holder, "ExclusiveLock", True)]
    finally:
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.close()


async def test_session_is_read_only_and_bounded(locklab_pg_dsn: str) -> None:
    """The settings `locks` connects with: no write can go through, no statement runs long."""
    from lab.load.locks import SAFE_SETTINGS

    conn = await asyncpg.connect(locklab_pg_dsn, server_settings=SAFE_SETTINGS)
    try:
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            await conn.execute("CREATE TABLE t (x int)")
        assert await conn.fetchval("SHOW statement_timeout") == "5s"
    finally:
        await conn.close()


def test_no_server_is_one_line() -> None:
    """A DSN nobody answers: one line, exit 2, no traceback."""
    proc = _locklab("locks", "--pg-dsn", "postgresql://postgres:x@127.0.0.1:1/postgres")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip().startswith("locklab: ") and len(proc.stderr.strip().splitlines()) == 1
    )
