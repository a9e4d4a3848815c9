"""Hot row: every buyer of a flash-sale SKU queues on one stock row, whatever the lock.

Symptom:    at a flash sale, checkouts of one product get slower the more buyers arrive;
            throughput is flat at 1 / (time a buyer holds the row), the database is idle.
Root cause: every buyer updates the same stock row and holds its row lock until commit
            (here `work_ms` of other work inside the transaction): they run one at a time.
            Any locking strategy (atomic UPDATE, FOR UPDATE, optimistic) serialises there.
Fix:        split the stock into `buckets` rows; a buyer picks a random bucket (seeded) and
            takes one unit with `... WHERE bucket = $2 AND stock >= 1`; on 0 rows it tries
            the other buckets in random order, and only when all are empty is it sold out.
Published:  "Với row cực nóng (một SKU flash sale nhận 5.000 request/giây), mọi cách lock đều
            xếp hàng tuần tự trên row đó. Giải pháp nằm ngoài lock: chia stock thành nhiều
            row "bucket" (ví dụ 10 row mỗi row 100 chiếc, request chọn ngẫu nhiên)" — no
            numbers measured (PostgreSQL 17.11) — locking-concurrency-control.vi.txt
See:        claim LC-25 in claims.py; expected/ has the schedules' transcripts. Defaults:
            40 buyers at once (burst), 20 ms of work inside each transaction, 1000 units,
            as 1 row (buggy) or 10 buckets of 100 (fixed). Buggy cannot finish sooner than
            40 × 20 ms = 800 ms; the claim asks fixed to sell at least 2× as many units per
            second. Pinned (two buyers, the work takes no time), the second buyer's UPDATE
            waits for the first one's commit on one row, and not on two buckets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.core.scenario import Check, Env
from lab.core.steps import Pinned, Session
from lab.errors import LabError

PRODUCT = 101
STOCK = 1000
TAKE = """
UPDATE inventory_buckets SET stock = stock - 1
WHERE product_id = $1 AND bucket = $2 AND stock >= 1
RETURNING stock
"""


UNGUARDED = "mutant-unguarded"  # the code mutant: TAKE without `stock >= 1`, at a sell-out


def buckets_of(env: Env) -> int:
    return 1 if env.variant == "buggy" else int(env.params["buckets"])


def stock_of(env: Env) -> int:
    """The units for sale: the `stock` param; the unguarded mutant sells out halfway (half as
    many units as buyers), where the guard is what stops a bucket going below zero."""
    return env.n // 2 if env.variant == UNGUARDED else int(env.params["stock"])


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["stock"] < p["buckets"]:  # the Params bound buckets and work_ms
        raise LabError(f"-p stock={p['stock']}: at least buckets ({p['buckets']})")


async def schema(env: Env) -> None:
    await env.db.execute(
        "CREATE TABLE inventory_buckets (product_id int, bucket int, stock int NOT NULL,"
        " PRIMARY KEY (product_id, bucket))"
    )


async def setup(env: Env) -> None:
    k = buckets_of(env)
    share, extra = divmod(stock_of(env), k)
    await env.db.executemany(
        "INSERT INTO inventory_buckets VALUES ($1, $2, $3)",
        [(PRODUCT, b, share + (1 if b < extra else 0)) for b in range(k)],
    )


async def _buy(env: Env, s: Session, buckets: int, take: str = TAKE) -> str:
    """Take one unit from a random bucket with stock, then `work_ms` more in the transaction."""
    order = list(range(buckets))
    env.rng(s.index).shuffle(order)
    async with s.transaction():
        for tries, bucket in enumerate(order, 1):
            if await s.fetchval("take", take, PRODUCT, bucket) is not None:
                env.sample("tries", tries)
                await s.other_logic(env.params["work_ms"] / 1000)  # create the order, etc.
                return "ok"
    return "sold_out"


async def buggy(env: Env, s: Session) -> str:
    return await _buy(env, s, 1)


async def fixed(env: Env, s: Session) -> str:
    return await _buy(env, s, env.params["buckets"])  # the whole fix


async def unguarded(env: Env, s: Session) -> str:
    """Not a variant: fixed with the guard dropped (its UPDATE without `stock >= 1`), the
    code mutant LC-25's invariant is judged against; it runs at a sell-out (stock_of)."""
    return await _buy(env, s, env.params["buckets"], TAKE.replace(" AND stock >= 1", ""))


async def invariant(env: Env) -> list[Check]:
    row = await env.db.fetchrow(
        "SELECT sum(stock) AS left, min(stock) AS lowest FROM inventory_buckets"
        " WHERE product_id = $1",
        PRODUCT,
    )
    assert row is not None
    sold, ok = stock_of(env) - row["left"], env.outcomes.get("ok", 0)
    return [
        Check("units sold == buyers that got ok", sold == ok, f"sold {sold}, ok {ok}"),
        Check("no bucket below zero", row["lowest"] >= 0, f"lowest bucket {row['lowest']}"),
    ]


# --- pinned: two buyers; with 1000 units each takes from its first bucket ------------------

STEPS = {"s1": ("take", "commit"), "s2": ("take", "commit")}
PINNED = Pinned(
    code={"buggy": buggy, "fixed": fixed},
    steps={"buggy": STEPS, "fixed": STEPS},
    schedules={
        v: {"both-take": ("s1 take", "s2 take", "s1 commit", "s2 commit")}
        for v in ("buggy", "fixed")
    },
)
