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
See:        claim LC-25. Defaults: 40 buyers at once (burst), 20 ms of work inside each
            transaction, 1000 units, as 1 row (buggy) or 10 buckets of 100 (fixed). Buggy
            cannot finish sooner than 40 × 20 ms = 800 ms; the claim asks fixed to sell at
            least 2× as many units per second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import asyncpg

from lab.claims import Claim, Record, invariants_hold
from lab.errors import LabError
from lab.scenario import Check, Defaults, Env, Scenario

PRODUCT = 101
STOCK = 1000
SPEEDUP = 2.0  # fixed must sell at least this many times as many units per second as buggy
TAKE = """
UPDATE inventory_buckets SET stock = stock - 1
WHERE product_id = $1 AND bucket = $2 AND stock >= 1
RETURNING stock
"""


def buckets_of(env: Env) -> int:
    return 1 if env.variant == "buggy" else int(env.params["buckets"])


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["buckets"] < 1 or p["stock"] < p["buckets"] or p["work_ms"] < 0:
        raise LabError("-p buckets must be >= 1, stock >= buckets, work_ms >= 0")


async def setup(env: Env) -> None:
    k = buckets_of(env)
    await env.db.execute(
        "CREATE TABLE inventory_buckets (product_id int, bucket int, stock int NOT NULL,"
        " PRIMARY KEY (product_id, bucket))"
    )
    share, extra = divmod(env.params["stock"], k)
    await env.db.executemany(
        "INSERT INTO inventory_buckets VALUES ($1, $2, $3)",
        [(PRODUCT, b, share + (1 if b < extra else 0)) for b in range(k)],
    )


async def buggy(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    return await _buy(env, conn, actor, 1)


async def fixed(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    return await _buy(env, conn, actor, env.params["buckets"])  # the whole fix


async def _buy(env: Env, conn: asyncpg.Connection | None, actor: int, buckets: int) -> str:
    """Take one unit from a random bucket with stock, then `work_ms` more in the transaction."""
    assert conn is not None
    order = list(range(buckets))
    env.rng(actor).shuffle(order)
    async with conn.transaction():
        for tries, bucket in enumerate(order, 1):
            if await conn.fetchval(TAKE, PRODUCT, bucket) is not None:
                env.sample("tries", tries)
                await asyncio.sleep(env.params["work_ms"] / 1000)  # create the order, etc.
                return "ok"
    return "sold_out"


async def invariant(env: Env) -> list[Check]:
    row = await env.db.fetchrow(
        "SELECT sum(stock) AS left, min(stock) AS lowest FROM inventory_buckets"
        " WHERE product_id = $1",
        PRODUCT,
    )
    assert row is not None
    sold, ok = env.params["stock"] - row["left"], env.outcomes.get("ok", 0)
    return [
        Check("units sold == buyers that got ok", sold == ok, f"sold {sold}, ok {ok}"),
        Check("no bucket below zero", row["lowest"] >= 0, f"lowest bucket {row['lowest']}"),
    ]


def _rate(rec: Record) -> float:
    return float(rec["outcomes"].get("ok", 0)) / max(float(rec["wall_ms"]), 1e-9) * 1000


def _line(rec: Record) -> str:
    lat = rec.get("latency_ms", {})
    return (
        f"{rec['variant']}: {rec['outcomes'].get('ok', 0)} sold in {rec['wall_ms']:.0f} ms = "
        f"{_rate(rec):.0f}/s, latency p50 {lat.get('p50', 0):.0f} ms p99 {lat.get('p99', 0):.0f} ms"
    )


def _serialised(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    floor = rec["outcomes"].get("ok", 0) * rec["params"]["work_ms"]
    return rec["wall_ms"] >= floor, f"{_line(rec)} (one at a time: >= {floor:.0f} ms)"


def _buckets_faster(records: Mapping[str, Record]) -> tuple[bool, str]:
    slow, fast = _rate(records["buggy"]), _rate(records["fixed"])
    return fast >= SPEEDUP * slow, (
        f"{_line(records['fixed'])}; {fast / max(slow, 1e-9):.1f}× buggy's {slow:.0f}/s"
    )


CLAIMS = (
    Claim(
        "LC-25",
        "buggy: buyers of one row run one at a time (wall >= buyers × work_ms)",
        ("buggy",),
        _serialised,
        published="mọi cách lock đều xếp hàng tuần tự trên row đó",
    ),
    Claim(
        "LC-25",
        f"fixed: bucket rows sell at least {SPEEDUP:.0f}× as many units per second",
        ("buggy", "fixed"),
        _buckets_faster,
        published='chia stock thành nhiều row "bucket" (ví dụ 10 row mỗi row 100 chiếc, '
        "request chọn ngẫu nhiên)",
    ),
    *(
        invariants_hold("LC-25", v, f"{v}: units sold == ok, no bucket negative")
        for v in ("buggy", "fixed")
    ),
)

SCENARIO = Scenario(
    id="hot-row",
    validate=validate,
    doc=__doc__ or "",
    kind="actors",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("ok", "sold_out"),
    claims=CLAIMS,
    published={
        "buggy": "mọi cách lock đều xếp hàng tuần tự trên row đó (no numbers published)",
        "fixed": "10 row mỗi row 100 chiếc, request chọn ngẫu nhiên (no numbers published)",
    },
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=40, arrival="burst", actor_timeout_s=60, run_timeout_s=120),
    params={"buckets": 10, "stock": STOCK, "work_ms": 20.0},
    param_help={
        "buckets": "fixed: stock rows the units are split across (buggy: always 1)",
        "stock": "units for sale, split evenly across the buckets",
        "work_ms": "other work inside the buyer's transaction while it holds its row",
    },
    sources=("LC",),
)
