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
See:        claim DP-9 in claims.py; scenarios/checkout_deadlock/ (the published 200-cart run,
            DL-1 – DL-5, and the same two carts pinned to schedules). The scenario's own settings
            are the 200-cart point; cases n10 … n100 run the buggy checkout at 10, 20, 40, 100
            carts, all at burst arrival (every cart released at once) and the same deadlock_timeout.
            What grows is the count: at burst most carts fail at every size (measured 60–100 %,
            70–100 % from 20 carts on: the share is near saturation and does not keep rising), so
            the count is close to n and each step of n (×2 or more) leaves a wide margin (e.g. at
            most 9 of 10, at least 14 of 20); judged on one run of each size.
"""

from __future__ import annotations

from lab.core.scenario import Env
from lab.core.steps import Session

# checkout-deadlock's table, stock and invariant: the same checkout, only more carts at once
from scenarios.checkout_deadlock.checkout_deadlock import SKUS, STEP, TAKE, invariant, schema, setup

__all__ = ["CASES", "POINTS", "SIZES", "buggy", "fixed", "invariant", "schema", "setup"]

STEP_PAUSE_S = 0.005  # the document's 5 ms of "other logic" between the two updates
SIZES = (10, 20, 40, 100, 200)  # carts; the last is the scenario's own setting
CASES = {f"n{n}": {"n": n} for n in SIZES[:-1]}
POINTS = (*CASES, "")  # the case of each size, in order ("" = the defaults, 200 carts)


def cart(s: Session) -> list[str]:
    """Half the carts (s1, s3, ...) hold [A-1, B-2], the other half the same SKUs reversed."""
    return list(SKUS) if s.index % 2 == 0 else list(reversed(SKUS))


async def checkout(s: Session, skus: list[str]) -> str:
    async with s.transaction():
        for sku in skus:  # one unit of each SKU, in the cart's order: steps lock-a, lock-b
            await s.execute(STEP[sku], TAKE, sku)
            await s.other_logic(STEP_PAUSE_S)  # named: the document's "other logic"
    return "ok"  # step commit


async def buggy(env: Env, s: Session) -> str:
    return await checkout(s, cart(s))


async def fixed(env: Env, s: Session) -> str:
    return await checkout(s, sorted(cart(s)))  # the whole fix
