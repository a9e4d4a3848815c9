"""My checkout: the last item sold twice (a user's own scenario file, outside the catalogue).

Symptom:    two buyers of the last item both get "ok"; stock goes 1 -> 0 but 2 were sold.
Root cause: read the stock, decide in the app, write the result: a plain SELECT takes no
            lock, so both buyers read 1.
Fix:        one guarded statement: UPDATE ... SET qty = qty - 1 WHERE qty >= 1.
See:        `locklab run tests/data/user_scenarios/my_checkout.py` (docs/scenario-files.md).
"""

from __future__ import annotations

import asyncio

import asyncpg

from lab.core.claims import invariant_broken, invariants_hold
from lab.core.scenario import Check, Defaults, Env, Scenario

SKU = "A-1"
STOCK = 1


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL)")
    await env.db.execute("INSERT INTO stock VALUES ($1, $2)", SKU, STOCK)
    await env.db.execute("CREATE TABLE sales (buyer int NOT NULL)")


async def buggy(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    assert conn is not None
    async with conn.transaction():
        qty = await conn.fetchval("SELECT qty FROM stock WHERE sku = $1", SKU)
        await asyncio.sleep(env.params["think_ms"] / 1000)  # the app decides: time is the subject
        if qty < 1:
            return "out_of_stock"
        await conn.execute("UPDATE stock SET qty = $1 WHERE sku = $2", qty - 1, SKU)
        await conn.execute("INSERT INTO sales VALUES ($1)", actor)
    return "ok"


async def fixed(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    assert conn is not None
    async with conn.transaction():
        done = await conn.execute("UPDATE stock SET qty = qty - 1 WHERE sku = $1 AND qty >= 1", SKU)
        if done != "UPDATE 1":
            return "out_of_stock"
        await conn.execute("INSERT INTO sales VALUES ($1)", actor)
    return "ok"


async def invariant(env: Env) -> list[Check]:
    """Items sold plus items left is what there was."""
    sold = await env.db.fetchval("SELECT count(*) FROM sales")
    left = await env.db.fetchval("SELECT qty FROM stock WHERE sku = $1", SKU)
    return [Check("sold + left == stock", sold + left == STOCK, f"sold {sold}, left {left}")]


SCENARIO = Scenario(
    id="my-checkout",
    doc=__doc__ or "",
    kind="actors",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("ok", "out_of_stock"),
    claims=(
        invariant_broken(
            "MY-1", "buggy", "sold + left == stock", "buggy: the last item sold twice"
        ),
        invariants_hold("MY-1", "fixed", "fixed: never sold more than there was"),
    ),
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=2, actor_timeout_s=30, run_timeout_s=60),
    params={"think_ms": 50.0},
    param_help={"think_ms": "time between the read and the write (the app's logic)"},
)
