"""Multi-row UPDATE lock order: the plan, not the list, decides which row is locked first.

Symptom:    checkouts that send their items sorted still deadlock (40P01): two sessions run
            the same `UPDATE inventory ... FROM (VALUES (101, 1), (202, 1))`, and one of
            them locks 202 before 101.
Root cause: "Thứ tự mà một câu UPDATE khoá row phụ thuộc vào plan (join order, index hay
            seq scan), nên không được đảm bảo": a nested loop driven by the VALUES list locks
            in list order; a hash join driven by a seq scan of the table locks in the order
            the rows are stored. Two sessions on different plans lock in opposite orders.
Fix:        lock first with `SELECT ... WHERE product_id = ANY($1) ORDER BY product_id FOR
            NO KEY UPDATE`, which locks in the order it returns rows under every plan, then
            update (fixed).
Published:  Vì sao không chỉ viết một câu UPDATE ... FROM (VALUES ...) nhiều row? Thứ tự mà
            một câu UPDATE khoá row phụ thuộc vào plan (join order, index hay seq scan), nên
            không được đảm bảo. SELECT ... ORDER BY ... FOR UPDATE thì khoá theo thứ tự row
            được trả về. — locking-concurrency-control.vi.txt, "Deadlock"
See:        claim LC-1 in claims.py; expected/ has the schedules' transcripts. Plans are
            forced per session with SET LOCAL enable_* (in a service they differ by
            statistics, parameters, generic vs custom plans): s1 `seq-scan` (a hash join over
            a seq scan of inventory, where 202 is stored first), s2 `index` (a nested loop
            over the list). A BEFORE UPDATE trigger stops each checkout right after it locked
            a row, on an advisory lock the `gate` session holds per session; `gate open-sN`
            reads which rows are still free (FOR UPDATE SKIP LOCKED), then lets sN go. In
            `cross` both stop after their first row lock, then go on in turn: the plans'
            opposite orders close a cycle (buggy). Under a load (`locklab run -n N`) no gate
            closes: the checkouts race.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

from lab.core.scenario import Check, Env
from lab.core.steps import Pinned, Session, schedule, show_sql
from lab.errors import LabError
from lab.pinned import rowgate

FIRST, SECOND = 101, 202  # the cart, sorted; 202 is stored first (see setup)
ITEMS = [FIRST, SECOND]
GATE = 4242  # advisory lock (GATE, session number): the trigger waits, the gate holds it
PADDING = 100  # other products, so a seq scan + hash of the 2-row list is the cheap join
# plan -> the planner settings SET LOCAL turns off to force it; s1 seq-scan, s2 index
PLANS: dict[str, tuple[str, ...]] = {
    "seq-scan": (
        "enable_indexscan",
        "enable_indexonlyscan",
        "enable_bitmapscan",
        "enable_nestloop",
        "enable_mergejoin",
    ),
    "index": ("enable_seqscan", "enable_bitmapscan", "enable_hashjoin", "enable_mergejoin"),
}
UPDATE = (
    f"UPDATE inventory i SET stock = i.stock - v.qty FROM (VALUES ({FIRST}, 1), ({SECOND}, 1)) "
    "AS v(product_id, qty) WHERE i.product_id = v.product_id RETURNING i.product_id"
)
LOCK_FIRST = """SELECT product_id FROM inventory WHERE product_id = ANY($1::int[])
ORDER BY product_id FOR NO KEY UPDATE"""
FREE = "SELECT product_id FROM inventory WHERE product_id = ANY($1::int[]) FOR UPDATE SKIP LOCKED"


def validate(n: int, p: Mapping[str, Any]) -> None:
    if n < 2:
        raise LabError(f"-n {n}: this scenario needs a pair of checkouts at least, -n 2")


async def schema(env: Env) -> None:
    await env.db.execute("CREATE TABLE inventory (product_id int PRIMARY KEY, stock int NOT NULL)")
    await env.db.execute(rowgate.trigger("inventory", GATE))  # s1, s2 wait there, pinned


async def setup(env: Env) -> None:
    # 202 goes in first, so a seq scan meets it before 101; the padding comes after both.
    await env.db.execute(
        "INSERT INTO inventory SELECT id, 1000 FROM unnest($1::int[]) id",
        [SECOND, FIRST, *range(1000, 1000 + PADDING)],
    )
    await env.db.execute("ANALYZE inventory")


def _ids(rows: list[Any]) -> str:
    return ", ".join(str(r[0]) for r in rows)


async def _checkout(s: Session, lock_first: bool) -> str:
    """Even sessions (s1, s3, ...) run on the seq-scan plan, odd ones on the index plan."""
    settings = [f"SET LOCAL {name} = off" for name in tuple(PLANS.values())[s.index % 2]]
    settings.append(rowgate.setting(s.index % 2 + 1))
    sql = [*settings, *([show_sql(LOCK_FIRST, [ITEMS])] if lock_first else []), UPDATE]

    async def run() -> str:
        await s.conn.execute("; ".join(settings))
        locked = await s.conn.fetch(LOCK_FIRST, ITEMS) if lock_first else []
        updated = await s.conn.fetch(UPDATE)  # its rows in the order it locked them (buggy)
        return (f"locked {_ids(locked)}; " if lock_first else "") + f"updated {_ids(updated)}"

    async with s.transaction():
        await s.step("checkout", run, shown="; ".join(sql))
    return "ok"


def gate(s: Session) -> Awaitable[str]:
    """Pinned only: the session that holds s1 and s2 after each row lock, then lets each go."""
    return rowgate.session(s, GATE, FREE, [ITEMS])


async def buggy(env: Env, s: Session) -> str:
    return await (gate(s) if s.name == "gate" else _checkout(s, lock_first=False))


async def fixed(env: Env, s: Session) -> str:
    return await (gate(s) if s.name == "gate" else _checkout(s, lock_first=True))  # the fix


TAKE_ONE = "UPDATE inventory SET stock = stock - 1 WHERE product_id = $1"


async def row_by_row(env: Env, s: Session) -> str:
    """Not a variant: buggy's checkout one row a statement, in the order its session's plan
    locks them (seq-scan: 202 first; index: 101 first), 5 ms apart. In a whole transaction
    the result is buggy's; the code mutant (lab.core.mutants.commits_partial) that drops
    all-or-nothing needs a write before the 40P01. Pinned, no gate holds a row (ROW_BY_ROW)."""
    if s.name == "gate":
        return "opened"
    order = [SECOND, FIRST] if s.index % 2 == 0 else [FIRST, SECOND]
    async with s.transaction():
        await s.execute("gate", rowgate.setting(s.index % 2 + 1))  # the trigger reads it
        for product in order:
            await s.execute(f"take-{product}", TAKE_ONE, product)
            await s.other_logic(0.005)
    return "ok"


async def invariant(env: Env) -> list[Check]:
    """Each committed checkout took one unit of both products; a deadlock loser none."""
    rows = await env.db.fetch(
        "SELECT product_id, stock FROM inventory WHERE product_id = ANY($1::int[]) ORDER BY 1",
        ITEMS,
    )
    commits = env.outcomes.get("ok", 0)
    return [
        Check(
            f"stock of {r['product_id']} moved once per commit",
            1000 - r["stock"] == commits,
            f"{r['product_id']} sold {1000 - r['stock']}, commits {commits}",
        )
        for r in rows
    ]


# --- pinned: s1 on the seq-scan plan, s2 on the index plan, the gate between their rows ---
CHECKOUT = ("checkout", "commit")
STEPS = {"s1": CHECKOUT, "s2": CHECKOUT, "gate": rowgate.STEPS}
# serial: one at a time, each stopped after its first row lock; cross: both stopped, then in turn
SERIAL = schedule(
    "gate close, s1 checkout, gate open-s1, s1 commit, s2 checkout, gate open-s2, s2 commit"
)
CROSS = schedule(
    "gate close, s1 checkout, s2 checkout, gate open-s1, gate open-s2, s1 commit, s2 commit"
)
# row_by_row pinned: s1 on the seq-scan plan's order, s2 on the index plan's; the gate idle
ROW_BY_ROW = {
    "s1": ("gate", f"take-{SECOND}", f"take-{FIRST}", "commit"),
    "s2": ("gate", f"take-{FIRST}", f"take-{SECOND}", "commit"),
    "gate": (),
}
PINNED = Pinned(
    code={"buggy": buggy, "fixed": fixed},
    steps={"buggy": STEPS, "fixed": STEPS},
    schedules={v: {"serial": SERIAL, "cross": CROSS} for v in ("buggy", "fixed")},
    sessions=("s1", "s2", "gate"),
)
