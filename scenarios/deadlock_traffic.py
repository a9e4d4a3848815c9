"""Deadlock traffic: the same cart-order checkout deadlocks more the more carts arrive together.

Symptom:    a checkout that "works in testing" (a few carts) fails with 40P01 more often as
            traffic grows; at peak most carts fail.
Root cause: half the carts lock [A-1, B-2], half [B-2, A-1]. Every pair of opposite carts
            that overlap can close a cycle, and the more carts overlap the more cycles close:
            the count of 40P01 grows with the number of carts arriving together.
Fix:        one global lock order (sorted SKUs): no cycle can form, at any traffic.
Published:  "死锁会随着流量增加而增多" (deadlocks increase as traffic grows); "测试环境没有生
            产环境中的并发情况" (the test environment lacks production's concurrency). No
            numbers — deadlock-prevention.zh.txt, "常见的借口" (common excuses).
See:        claim DP-9; scenarios/checkout_deadlock/checkout_deadlock.py (the published 200-cart run, DL-1 –
            DL-5). The scenario's own settings are the 200-cart point; cases n10 … n100 run
            the buggy checkout at 10, 20, 40, 100 carts, all at burst arrival (every cart
            released at once) and the same deadlock_timeout. What grows is the count: at
            burst most carts fail at every size (measured 60–100 %, 70–100 % from 20 carts
            on: the share is near saturation and does not keep rising), so the count is
            close to n and each step of n (×2 or more) leaves a wide margin (e.g. at most 9
            of 10, at least 14 of 20); judged on one run of each size.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping

import asyncpg

from lab.claims import Claim, Record, all_ok, deadlocks
from lab.scenario import Defaults, Env, Scenario

# checkout-deadlock's table, stock and invariant: the same checkout, only more carts at once
from scenarios.checkout_deadlock.checkout_deadlock import SKUS, invariant, setup

STEP_PAUSE_S = 0.005  # the document's 5 ms of "other logic" between the two updates
SIZES = (10, 20, 40, 100, 200)  # carts; the last is the scenario's own setting
CASES = {f"n{n}": {"n": n} for n in SIZES[:-1]}
POINTS = (*CASES, "")  # the case of each size, in order ("" = the defaults, 200 carts)


def cart(actor: int) -> list[str]:
    """Half the carts hold [A-1, B-2], the other half the same SKUs reversed."""
    return list(SKUS) if actor % 2 == 0 else list(reversed(SKUS))


async def buggy(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    return await checkout(conn, cart(actor))


async def fixed(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    return await checkout(conn, sorted(cart(actor)))  # the whole fix


async def checkout(conn: asyncpg.Connection | None, skus: list[str]) -> str:
    assert conn is not None
    async with conn.transaction():
        for sku in skus:  # step take: one unit of each SKU, in the cart's order
            await conn.execute("UPDATE inventory SET qty = qty - 1 WHERE sku = $1", sku)
            await asyncio.sleep(STEP_PAUSE_S)  # named: the document's "other logic"
    return "ok"  # step commit


# --- claims -------------------------------------------------------------------------------


def _grows(records: Mapping[str, Record]) -> tuple[bool, str]:
    recs = [records[f"buggy@{c}"] for c in POINTS]
    counts = [r["outcomes"].get("40P01", 0) for r in recs]
    server = [r["evidence"].get("pg_stat_deadlocks", 0) for r in recs]
    rising = all(a < b for xs in (counts, server) for a, b in itertools.pairwise(xs))
    seen = ", ".join(
        f"n={r['knobs']['n']}: {c} ({100 * c / r['knobs']['n']:.0f} %, server {s})"
        for r, c, s in zip(recs, counts, server, strict=True)
    )
    dt = recs[0]["knobs"]["deadlock_timeout_ms"]
    return rising, f"buggy, burst, deadlock_timeout {dt} ms: 40P01 {seen}"


CLAIMS = (
    Claim(
        "DP-9",
        f"buggy: the 40P01 count (and the server's deadlock count) rises with every step of "
        f"n = {', '.join(map(str, SIZES))} at one arrival pattern",
        tuple(f"buggy@{c}" for c in POINTS),
        _grows,
        published="死锁会随着流量增加而增多",
        cases=POINTS,
        across=True,
    ),
    all_ok("DP-9", "fixed", f"fixed: all {SIZES[-1]} sorted checkouts succeed"),
    deadlocks("DP-9", "fixed", f"fixed: zero deadlocks at {SIZES[-1]} carts", expect=False),
)

SCENARIO = Scenario(
    id="deadlock-traffic",
    doc=__doc__ or "",
    kind="actors",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("ok", "40P01"),
    claims=CLAIMS,
    published={"buggy": "死锁会随着流量增加而增多"},
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=SIZES[-1], arrival="burst", actor_timeout_s=120, run_timeout_s=300),
    sources=("DP",),
    quick={"deadlock_timeout_ms": 100},
    cases=CASES,
)
