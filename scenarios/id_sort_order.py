"""Id sort order: one path sorts numeric ids as strings, another locks ORDER BY id.

Symptom:    the deadlock that sorting was supposed to remove comes back, only for some
            accounts: those whose ids have a different number of digits (9 and 10).
Root cause: "lock in a global order" needs every code path to agree on the order. The
            app sorts ids with a default sort that compares strings (`[10, 9].sort()` in
            JavaScript gives [10, 9], "10" < "9"), while SQL `ORDER BY id` sorts numbers
            (9, 10). One path holds 10 and waits for 9, the other holds 9 and waits for 10.
Fix:        sort numbers as numbers (`sort((a, b) => a - b)`), or let SQL lock both rows
            `ORDER BY id` in every path.
Published:  "[10, 9].sort() trong JS cho [10, 9] vì default sort so sánh chuỗi ("10" < "9");
            trong khi SQL ORDER BY id sắp theo số (9, 10) ... thứ tự lại không nhất quán và
            deadlock quay lại" — deadlock-distributed-lock-cron.vi.txt (đọc deadlock log)
See:        claim DL-6. Even actors take the app path (lock one id, other logic, lock the
            next); odd actors take the SQL path after the same other logic, so the app
            path holds its first row before the SQL path asks for it.
"""

from __future__ import annotations

import asyncio

import asyncpg

from lab.claims import all_ok, deadlocks, invariants_hold
from lab.scenario import Check, Defaults, Env, Scenario

IDS = (9, 10)
INITIAL = 1_000_000
AMOUNT = 1


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)")
    await env.db.executemany("INSERT INTO accounts VALUES ($1, $2)", [(i, INITIAL) for i in IDS])


def js_default_sort(ids: list[int]) -> list[int]:
    """JavaScript's Array.prototype.sort() without a comparator: compares as strings."""
    return sorted(ids, key=str)


def numeric_sort(ids: list[int]) -> list[int]:
    return sorted(ids)


async def _touch(conn: asyncpg.Connection, ids: list[int]) -> None:
    await conn.execute("UPDATE accounts SET balance = balance + $2 WHERE id = ANY($1)", ids, AMOUNT)


async def _app_path(env: Env, conn: asyncpg.Connection, order: list[int]) -> str:
    pause = env.params["step_pause_ms"] / 1000
    async with conn.transaction():
        for i in order:
            await conn.execute("SELECT id FROM accounts WHERE id = $1 FOR UPDATE", i)
            await asyncio.sleep(pause)  # other logic between the two locks
        await _touch(conn, order)
    return "ok"


async def _sql_path(env: Env, conn: asyncpg.Connection) -> str:
    await asyncio.sleep(env.params["step_pause_ms"] / 2000)  # other logic first
    async with conn.transaction():
        await conn.execute(
            "SELECT id FROM accounts WHERE id = ANY($1) ORDER BY id FOR UPDATE", list(IDS)
        )
        await _touch(conn, list(IDS))
    return "ok"


async def buggy(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    assert conn is not None
    if actor % 2:
        return await _sql_path(env, conn)
    return await _app_path(env, conn, js_default_sort(list(IDS)))  # [10, 9]


async def fixed(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    assert conn is not None
    if actor % 2:
        return await _sql_path(env, conn)
    return await _app_path(env, conn, numeric_sort(list(IDS)))  # [9, 10]: the whole fix


async def invariant(env: Env) -> list[Check]:
    """Every committed transfer added AMOUNT to both rows, exactly once."""
    rows = await env.db.fetch("SELECT id, balance FROM accounts ORDER BY id")
    commits = env.outcomes.get("ok", 0)
    return [
        Check(
            f"account {r['id']} moved once per commit",
            r["balance"] - INITIAL == commits * AMOUNT,
            f"moved {r['balance'] - INITIAL}, commits {commits}",
        )
        for r in rows
    ]


PUBLISHED = "thứ tự lại không nhất quán và deadlock quay lại"
CLAIMS = (
    deadlocks("DL-6", "buggy", "String-sorted path against ORDER BY id deadlocks", expect=True,
              published=PUBLISHED),
    all_ok("DL-6", "fixed", "Both paths in numeric order: every transfer commits"),
    deadlocks("DL-6", "fixed", "Both paths in numeric order: zero deadlocks", expect=False),
    *(invariants_hold("DL-6", v, f"{v}: balances moved once per commit") for v in ("buggy", "fixed")),
)  # fmt: skip

SCENARIO = Scenario(
    id="id-sort-order",
    doc=__doc__ or "",
    kind="actors",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("ok", "40P01"),
    claims=CLAIMS,
    published={"buggy": PUBLISHED},
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=20, arrival="burst", actor_timeout_s=120, run_timeout_s=300),
    params={"step_pause_ms": 5.0},
    param_help={"step_pause_ms": "other logic between the app path's two locks"},
    sources=("DL",),
    quick={"deadlock_timeout_ms": 100},
)
