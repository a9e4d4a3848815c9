"""Lost update: two buyers read stock 1, both see enough, both write stock 0.

Symptom:    product 101 has one unit left; two checkouts arrive together and both
            succeed: two orders, stock 0. One decrement "vanished".
Root cause: read, compute in the app, write the computed value (SET stock = $computed).
            At READ COMMITTED a plain SELECT takes no lock, so BEGIN ... COMMIT around
            the three steps does not help: both transactions read 1 before either writes.
            The second UPDATE waits for the first one's row lock, then overwrites 0 with 0.
Fix:        atomic guarded UPDATE ... SET stock = stock - $1 WHERE ... AND stock >= $1,
            rowcount 0 → out_of_stock (fixed): the waiter re-evaluates WHERE on the new
            row version; or SELECT ... FOR NO KEY UPDATE first (fixed-for-update): the
            second buyer waits in its read and reads the new stock; or a version column,
            UPDATE ... WHERE version = $read (fixed-optimistic): UPDATE 0 → 409 conflict.
            At REPEATABLE READ the waiter does not re-evaluate: it fails with 40001
            (-p isolation=repeatable_read), so code that raises the level must retry.
Published:  read-compute-write: "Cả hai request đọc stock = 1, cả hai thấy đủ hàng, cả hai
            ghi stock = 0 và cả hai tạo order. Bạn vừa bán 2 chiếc khi chỉ có 1." (both
            read 1, both write 0 and create an order: 2 sold when there was 1). Atomic
            UPDATE, stock 1, called twice in parallel: [ { status: 'fulfilled', value: 0 },
            { status: 'rejected', reason: Error: OUT_OF_STOCK } ]. FOR NO KEY UPDATE: the
            second transaction waits in the SELECT until the first commits, then reads the
            new value. Version column: "Người thứ nhất lưu: UPDATE 1 (version 7 → 8)",
            "Người thứ hai lưu với version=7: UPDATE 0 → 409 Conflict". No timings are
            published (PostgreSQL 17.11, Node 24 + node-postgres)
            — locking-concurrency-control.vi.txt, "Bối cảnh & vấn đề", "Ba cách chống lost update"
See:        claims LC-4..LC-8 in claims.py; expected/ has the schedules' transcripts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg

from lab.core.scenario import Check, Env, executes
from lab.core.steps import Pinned, Session, schedule

PRODUCT = 101
INITIAL_VERSION = 7  # the document's form opened at version 7

READ = "SELECT stock, version FROM inventory WHERE product_id = $1"
READ_LOCKED = READ + " FOR NO KEY UPDATE"
WRITE_COMPUTED = "UPDATE inventory SET stock = $1 WHERE product_id = $2"
WRITE_GUARDED = (
    "UPDATE inventory SET stock = stock - $1 WHERE product_id = $2 AND stock >= $1 RETURNING stock"
)
WRITE_VERSIONED = (
    "UPDATE inventory SET stock = $1, version = version + 1 WHERE product_id = $2 AND version = $3"
)


schema = executes(
    "CREATE TABLE inventory (product_id int PRIMARY KEY, stock int NOT NULL, version int NOT NULL)"
)


async def setup(env: Env) -> None:
    await env.db.execute(
        "INSERT INTO inventory VALUES ($1, $2, $3)", PRODUCT, env.params["stock"], INITIAL_VERSION
    )


# --- one buyer; the variants change one step ----------------------------------------------

Write = Callable[[Session, int, "asyncpg.Record | None"], Awaitable[str]]


async def _buy(env: Env, s: Session, read: str | None, write: Write, pause_s: float = 0.0) -> str:
    qty = env.params["qty"]
    async with s.transaction(isolation=env.params["isolation"]):
        row = await s.fetchrow("read", read, PRODUCT) if read else None
        if row is not None and row["stock"] < qty:
            return "out_of_stock"
        await s.other_logic(pause_s)
        return await write(s, qty, row)  # a buyer who got "ok" created its order


async def _computed(s: Session, qty: int, row: asyncpg.Record | None) -> str:
    assert row is not None
    await s.execute("write", WRITE_COMPUTED, row["stock"] - qty, PRODUCT)
    return "ok"


async def _guarded(s: Session, qty: int, row: asyncpg.Record | None) -> str:
    left = await s.fetchval("write", WRITE_GUARDED, qty, PRODUCT)
    return "out_of_stock" if left is None else "ok"  # rowCount 0 → OUT_OF_STOCK


async def _versioned(s: Session, qty: int, row: asyncpg.Record | None) -> str:
    assert row is not None
    status = await s.execute("write", WRITE_VERSIONED, row["stock"] - qty, PRODUCT, row["version"])
    return "ok" if status == "UPDATE 1" else "conflict"  # UPDATE 0 → HTTP 409


async def buggy(env: Env, s: Session) -> str:
    return await _buy(env, s, READ, _computed)


async def read_pause_write(env: Env, s: Session) -> str:
    """Not a variant: buggy with 20 ms between its read and its write, so that under a load
    both buyers read before either writes (the overlap, every run): the code mutant the
    fixes' load invariant is judged against (buggy's own load overlaps only by chance)."""
    return await _buy(env, s, READ, _computed, pause_s=0.02)


async def fixed(env: Env, s: Session) -> str:
    return await _buy(env, s, None, _guarded)  # no read: SQL does the math


async def fixed_for_update(env: Env, s: Session) -> str:
    return await _buy(env, s, READ_LOCKED, _computed)


async def fixed_optimistic(env: Env, s: Session) -> str:
    return await _buy(env, s, READ, _versioned)


async def invariant(env: Env) -> list[Check]:
    """Every unit sold left the stock, and no more units were sold than there were."""
    stock = await env.db.fetchval("SELECT stock FROM inventory WHERE product_id = $1", PRODUCT)
    sold = env.outcomes.get("ok", 0) * env.params["qty"]
    initial = env.params["stock"]
    moved = f"stock {initial} -> {stock}"
    return [
        Check("no oversell", sold <= initial, f"sold {sold}, initial stock {initial}"),
        Check("sold == initial - final stock", sold == initial - stock, f"sold {sold}, {moved}"),
        Check("stock never negative", stock >= 0, f"final stock {stock}"),
    ]


# --- pinned: the steps each buyer takes, and the orders the documents describe -----------
S = ("read", "write", "commit")
SERIAL = schedule("s1 read, s1 write, s1 commit, s2 read, s2 write, s2 commit")
BOTH_READ = schedule("s1 read, s2 read, s1 write, s2 write, s1 commit, s2 commit")
READ_WAITS = schedule("s1 read, s2 read, s1 write, s1 commit, s2 write, s2 commit")
CODE = {"buggy": buggy, "fixed": fixed}
CODE |= {"fixed-for-update": fixed_for_update, "fixed-optimistic": fixed_optimistic}
PINNED = Pinned(
    code=CODE,
    steps={v: {"s1": S, "s2": S} for v in CODE} | {"fixed": {"s1": S[1:], "s2": S[1:]}},
    schedules={
        # both read 1 before either writes; the second writer meets an uncommitted write
        "buggy": {"both-read-first": BOTH_READ, "serial": SERIAL},
        "fixed": {"both-read-first": schedule("s1 write, s2 write, s1 commit, s2 commit")},
        "fixed-for-update": {"both-read-first": READ_WAITS},  # s2's locking read waits for s1
        "fixed-optimistic": {"both-read-first": BOTH_READ},
    },
    isolation=("read_committed", "repeatable_read"),
)
