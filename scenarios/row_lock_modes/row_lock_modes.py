"""Row lock modes: the four modes conflict as documented; a key UPDATE blocks child inserts.

Symptom:    while one request changes an order's id (or deletes it), every INSERT of an item
            for that order waits; while another only changes its status, none does.
Root cause: an UPDATE that changes a column of a unique index usable by a foreign key (here
            the primary key) takes FOR UPDATE on the row; the FK check of a child INSERT takes
            FOR KEY SHARE, and FOR UPDATE is the one mode that conflicts with it. An UPDATE of
            any other column takes FOR NO KEY UPDATE, which does not.
Fix:        (fixed) do not change keys of referenced rows: update other columns. Variant
            `matrix` runs every pair of the four modes on one row and prints the table.
Published:  "FOR UPDATE xung đột với FOR KEY SHARE ... Tương tự, UPDATE đổi giá trị primary key
            của cha lấy FOR UPDATE và sẽ chặn (và bị chặn bởi) insert con." "Row lock nằm trong
            tuple header, không escalation: FOR UPDATE > FOR NO KEY UPDATE > FOR SHARE > FOR
            KEY SHARE. FK check dùng KEY SHARE nên UPDATE thường không chặn insert con." No
            numbers (PostgreSQL 17.11) — locking-concurrency-control.vi.txt, "Row-level lock"
See:        claim LC-34 in claims.py; fk-lock-modes (FOR UPDATE vs FOR NO KEY UPDATE on a
            parent, LC-11). The document's conflict table ("Bảng xung đột (✗ = phải chờ)")
            lost its rows; CONFLICTS is the one its list of modes describes, which is
            PostgreSQL's manual (Table 13.3). A pair is blocked when the waiting probe shows up
            in pg_blocking_pids() behind the holder, and a NOWAIT probe must agree (55P03).
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from lab.core.scenario import Env
from lab.pinned.interleave import task_or_blocked

KEY_PARENT, MATRIX_ROW = 1, 2
MODES = ("UPDATE", "NO KEY UPDATE", "SHARE", "KEY SHARE")
CONFLICTS = {  # the documented conflicts (✗ = must wait): held mode -> asked modes it blocks
    "UPDATE": set(MODES),
    "NO KEY UPDATE": {"UPDATE", "NO KEY UPDATE", "SHARE"},
    "SHARE": {"UPDATE", "NO KEY UPDATE"},
    "KEY SHARE": {"UPDATE"},
}
SHORT = dict(zip(MODES, ("U", "NK", "S", "KS"), strict=True))


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE parents (id int PRIMARY KEY, name text NOT NULL)")
    await env.db.execute(
        "CREATE TABLE children (id serial PRIMARY KEY, parent_id int NOT NULL REFERENCES parents)"
    )
    await env.db.execute(f"INSERT INTO parents VALUES ({KEY_PARENT}, 'key'), ({MATRIX_ROW}, 'm')")


async def buggy(env: Env) -> None:
    env.extra_evidence["parent_update"] = await parent_update(env, "id = id + 10000")


async def fixed(env: Env) -> None:
    env.extra_evidence["parent_update"] = await parent_update(env, "name = 'renamed'")


async def parent_update(env: Env, change: str) -> dict[str, Any]:
    """A holder updates a parent (`change`) and stays open; a child INSERT for it."""
    holder, child = await env.connect(), await env.connect()
    pid = holder.get_server_pid()
    try:
        await holder.execute("BEGIN")
        await holder.execute(f"UPDATE parents SET {change} WHERE id = {KEY_PARENT}")  # step update
        task = asyncio.create_task(  # step insert: finishes, or the server shows it blocked
            child.execute("INSERT INTO children (parent_id) VALUES ($1)", KEY_PARENT)
        )
        blocked = await task_or_blocked(env.db, child.get_server_pid(), task, what="child insert")
        await holder.execute("ROLLBACK")  # step end
        await task
    finally:
        holder.terminate()
        child.terminate()
    env.outcome("blocked" if blocked else "ok")
    return {"change": change, "blocked_by": blocked, "holder": pid}


async def matrix(env: Env) -> None:
    """LC-34: for each pair, a holder locks the row in one mode; a NOWAIT probe and a
    waiting probe ask for the other; the server says who was blocked."""
    holder, probe = await env.connect(), await env.connect()
    pid, cells = holder.get_server_pid(), []
    try:
        for held in MODES:
            for asked in MODES:
                sql = f"SELECT id FROM parents WHERE id = {MATRIX_ROW} FOR {asked}"
                await holder.execute("BEGIN")
                await holder.execute(f"SELECT id FROM parents WHERE id = {MATRIX_ROW} FOR {held}")
                try:  # step nowait
                    await probe.execute(sql + " NOWAIT")
                    nowait = "ok"
                except asyncpg.LockNotAvailableError:
                    nowait = "55P03"
                await probe.execute("BEGIN")  # step wait: finishes, or shown blocked
                task = asyncio.create_task(probe.execute(sql))
                blocked = await task_or_blocked(env.db, probe.get_server_pid(), task, what=sql)
                await holder.execute("ROLLBACK")
                await task
                await probe.execute("ROLLBACK")
                cells.append(
                    {"held": held, "asked": asked, "nowait": nowait, "blocked_by": blocked}
                )
                env.outcome("blocked" if blocked else "ok")
    finally:
        holder.terminate()
        probe.terminate()
    env.extra_evidence["holder"] = pid
    env.extra_evidence["matrix"] = cells
    env.extra_evidence["matrix_table"] = table(cells)


def table(cells: list[dict[str, Any]]) -> str:
    """The matrix as the manual prints it: the holder's mode down, the asked mode across."""
    mark = {(c["held"], c["asked"]): "✗" if c["blocked_by"] else "·" for c in cells}
    rows = [f"{SHORT[h]:<3}" + "".join(f"{mark[h, a]:<3}" for a in MODES) for h in MODES]
    legend = "(✗ blocked; U UPDATE, NK NO KEY UPDATE, S SHARE, KS KEY SHARE)"
    return "\n".join(["   " + "".join(f"{SHORT[a]:<3}" for a in MODES), *rows, legend])
