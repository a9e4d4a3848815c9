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
See:        claim DL-6 in claims.py; expected/ has the schedules' transcripts. Even actors
            (s1) take the app path (lock one id, other logic, lock the next); odd actors
            (s2) the SQL path. Schedule app-first: the app path holds its first row before
            the SQL path asks for both.
"""

from __future__ import annotations

from lab.core.scenario import Check, Env
from lab.core.steps import Pinned, Session

IDS = (9, 10)
INITIAL = 1_000_000
AMOUNT = 1
LOCK_ONE = "SELECT id FROM accounts WHERE id = $1 FOR UPDATE"
LOCK_BOTH = "SELECT id FROM accounts WHERE id = ANY($1) ORDER BY id FOR UPDATE"
TOUCH = "UPDATE accounts SET balance = balance + $2 WHERE id = ANY($1)"


async def schema(env: Env) -> None:
    await env.db.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)")


async def setup(env: Env) -> None:
    await env.db.executemany("INSERT INTO accounts VALUES ($1, $2)", [(i, INITIAL) for i in IDS])


def js_default_sort(ids: list[int]) -> list[int]:
    """JavaScript's Array.prototype.sort() without a comparator: compares as strings."""
    return sorted(ids, key=str)


def numeric_sort(ids: list[int]) -> list[int]:
    return sorted(ids)


async def _app_path(env: Env, s: Session, order: list[int]) -> str:
    async with s.transaction():
        for i in order:
            await s.execute(f"lock-{i}", LOCK_ONE, i)
            await s.other_logic(env.params["step_pause_ms"] / 1000)  # between the two locks
        await s.execute("touch", TOUCH, order, AMOUNT)
    return "ok"


async def _sql_path(s: Session) -> str:
    async with s.transaction():
        await s.execute("lock-both", LOCK_BOTH, list(IDS))
        await s.execute("touch", TOUCH, list(IDS), AMOUNT)
    return "ok"


async def buggy(env: Env, s: Session) -> str:
    if s.index % 2:
        return await _sql_path(s)
    return await _app_path(env, s, js_default_sort(list(IDS)))  # [10, 9]


async def fixed(env: Env, s: Session) -> str:
    if s.index % 2:
        return await _sql_path(s)
    return await _app_path(env, s, numeric_sort(list(IDS)))  # [9, 10]: the whole fix


async def touch_each(env: Env, s: Session) -> str:
    """Not a variant: buggy's two orders (the app's string sort, SQL's numeric one), each
    path adding AMOUNT to a row as it locks it, one UPDATE a row. In a whole transaction the
    result is buggy's; the code mutant (lab.core.mutants.commits_partial) that drops
    all-or-nothing needs that write before the 40P01."""
    order = numeric_sort(list(IDS)) if s.index % 2 else js_default_sort(list(IDS))
    async with s.transaction():
        for i in order:
            await s.execute(f"touch-{i}", TOUCH, [i], AMOUNT)
            await s.other_logic(env.params["step_pause_ms"] / 1000)
    return "ok"


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


# --- pinned: s1 the app path, s2 the SQL path --------------------------------------------

SQL = ("lock-both", "touch", "commit")
PINNED = Pinned(
    code={"buggy": buggy, "fixed": fixed},
    steps={
        "buggy": {"s1": ("lock-10", "lock-9", "touch", "commit"), "s2": SQL},
        "fixed": {"s1": ("lock-9", "lock-10", "touch", "commit"), "s2": SQL},
    },
    schedules={
        # the app path holds its first row before the SQL path asks for both
        "buggy": {
            "app-first": (
                "s1 lock-10",
                "s2 lock-both",
                "s1 lock-9",
                "s1 touch",
                "s1 commit",
                "s2 touch",
                "s2 commit",
            )
        },
        "fixed": {
            "app-first": (
                "s1 lock-9",
                "s2 lock-both",
                "s1 lock-10",
                "s1 touch",
                "s1 commit",
                "s2 touch",
                "s2 commit",
            )
        },
    },
)
