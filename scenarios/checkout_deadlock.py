"""Checkout deadlock: two carts lock the same SKUs in opposite order.

Symptom:    at peak, checkouts fail with 40P01 deadlock_detected; the log is full of
            "deadlock detected", and the batch takes ~deadlock_timeout per cycle.
Root cause: each checkout updates its rows in cart order; cart [A-1, B-2] holds A-1 and
            waits for B-2 while cart [B-2, A-1] holds B-2 and waits for A-1. Isolation
            level has nothing to do with it: row locks are held to commit at every level.
Fix:        lock in one global order: sort the SKUs (fixed), or take every row lock
            first with one SELECT ... ORDER BY sku FOR NO KEY UPDATE (fixed-lock-first).
Published:  200 carts, half reversed, 5 ms between updates: cart order
            {"ok":4,"40P01":196} in 99403 ms, sorted {"ok":200} in 10955 ms; 40 carts:
            {"ok":9,"40P01":31} in 20.7 s vs {"ok":40} in 6.1 s (PostgreSQL 17.11,
            deadlock_timeout=1s, Node 24 + node-postgres) — deadlock-distributed-lock-cron.vi.txt
See:        claims DL-1..DL-4; design.md "Workload model" for what arrival does to wall time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import asyncpg

from lab.claims import Claim, Record, all_ok, deadlocks, invariants_hold, majority, repeated
from lab.errors import LabError
from lab.scenario import Check, Defaults, Env, Scenario
from scenarios._node_seconds import CHECKOUT_CASES, CHECKOUT_SECONDS

SKUS = ("A-1", "B-2")
INITIAL_QTY = 1_000_000
ISOLATION_LEVELS = ("read_committed", "repeatable_read", "serializable")


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["isolation"] not in ISOLATION_LEVELS:
        raise LabError(f"-p isolation={p['isolation']!r}: one of {', '.join(ISOLATION_LEVELS)}")
    if p["step_pause_ms"] < 0:
        raise LabError("-p step_pause_ms must be >= 0")


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE inventory (sku text PRIMARY KEY, qty int NOT NULL)")
    await env.db.executemany(
        "INSERT INTO inventory VALUES ($1, $2)", [(s, INITIAL_QTY) for s in SKUS]
    )


def cart(actor: int) -> list[str]:
    """Half the carts hold [A-1, B-2], the other half the same SKUs reversed."""
    return list(SKUS) if actor % 2 == 0 else list(reversed(SKUS))


async def buggy(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    return await _checkout(env, conn, cart(actor))


async def fixed(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    return await _checkout(env, conn, sorted(cart(actor)))  # the whole fix


async def fixed_lock_first(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    return await _checkout(env, conn, cart(actor), lock_first=True)


async def _checkout(
    env: Env, conn: asyncpg.Connection | None, skus: list[str], lock_first: bool = False
) -> str:
    assert conn is not None
    pause = env.params["step_pause_ms"] / 1000
    isolation = env.params["isolation"]
    async with conn.transaction(isolation=isolation):
        if lock_first:
            await conn.execute(
                "SELECT sku FROM inventory WHERE sku = ANY($1) ORDER BY sku FOR NO KEY UPDATE",
                skus,
            )
        for sku in skus:
            await conn.execute("UPDATE inventory SET qty = qty - 1 WHERE sku = $1", sku)
            await asyncio.sleep(pause)  # "other logic" inside the transaction
    return "ok"


async def invariant(env: Env) -> list[Check]:
    """Each committed checkout took exactly one unit of every SKU in its cart."""
    rows = await env.db.fetch("SELECT sku, qty FROM inventory ORDER BY sku")
    sold = {r["sku"]: INITIAL_QTY - r["qty"] for r in rows}
    commits = env.outcomes.get("ok", 0)
    return [
        Check(
            f"stock of {sku} moved once per commit",
            sold[sku] == commits,
            f"{sku} sold {sold[sku]}, commits {commits}",
        )
        for sku in SKUS
    ]


def _no_early_40p01(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    timeout_ms = rec["knobs"]["deadlock_timeout_ms"]
    first = rec.get("latency_ms_by_outcome", {}).get("40P01", {}).get("min")
    if first is None:
        return False, "buggy: no 40P01 to time"
    return (
        first >= timeout_ms,
        f"buggy: first 40P01 after {first:.0f} ms (deadlock_timeout {timeout_ms} ms)",
    )


def _scales_with_timeout(records: Mapping[str, Record]) -> tuple[bool, str]:
    short, long = records[f"buggy@{SHORT}"], records[f"buggy@{LONG}"]
    ratio = long["wall_ms"] / max(short["wall_ms"], 1.0)
    return ratio >= MIN_SLOWDOWN, (
        f"buggy, {short['knobs']['n']} carts: {short['wall_ms']:.0f} ms at deadlock_timeout "
        f"{short['knobs']['deadlock_timeout_ms']} ms, {long['wall_ms']:.0f} ms at "
        f"{long['knobs']['deadlock_timeout_ms']} ms: x{ratio:.1f}"
    )


def _long_cycles(records: Mapping[str, Record]) -> tuple[bool, str]:
    dl = records["buggy"]["evidence"].get("deadlocks") or {}
    return dl.get("max_cycle", 0) > 2, (
        f"buggy: cycle lengths {dl.get('cycle_lengths')}, tuple hops {dl.get('tuple_hops')}"
    )


FIXES = ("fixed", "fixed-lock-first")
# Two reversed carts with a long pause between their updates: each takes its first row
# lock long before the other asks for it, so the cycle is forced at any isolation level.
FORCED = {"n": 2, "step_pause_ms": 200.0}
# DL-5: the same batch with a 4x longer deadlock_timeout. Every cycle waits the timeout
# before it is detected, so the batch grows with it (measured x2.6-x5.8 at 20 carts).
SHORT, LONG = "timeout-250", "timeout-1000"
MIN_SLOWDOWN = 1.5
CLAIMS = (
    Claim(
        "DL-5",
        f"Each cycle costs deadlock_timeout: 4x the timeout makes the buggy batch at least "
        f"{MIN_SLOWDOWN}x longer",
        (f"buggy@{SHORT}", f"buggy@{LONG}"),
        _scales_with_timeout,
        published="cả batch mất 99 giây, vì mỗi vòng chờ tốn ít nhất deadlock_timeout = 1s",
        cases=(SHORT, LONG),
        across=True,
    ),
    replace(
        deadlocks(
            "DL-2",
            "buggy",
            "Lowering or raising isolation does not help: cart order deadlocks at every level",
            expect=True,
            published="Deadlock row-lock không liên quan isolation level",
        ),
        cases=("", "repeatable-read", "serializable"),
    ),
    Claim(
        "DL-1",
        "No 40P01 comes before the waiter has waited deadlock_timeout",
        ("buggy",),
        _no_early_40p01,
    ),
    # How many carts deadlock depends on scheduling: judged over trials, not one lucky run.
    repeated(
        majority(
            "DL-3",
            "buggy",
            "40P01",
            "Cart order: most checkouts fail with 40P01",
            published='{"ok":4,"40P01":196} in 99403 ms',
        ),
        trials=3,
        required=2 / 3,
    ),
    deadlocks("DL-3", "buggy", "Cart order: the server reports deadlocks", expect=True),
    *(
        all_ok("DL-3", v, f"{v}: every checkout succeeds", published='{"ok":200} in 10955 ms')
        for v in FIXES
    ),
    *(deadlocks("DL-3", v, f"{v}: zero deadlocks", expect=False) for v in FIXES),
    *(invariants_hold("DL-3", v, f"{v}: stock moved once per commit") for v in ("buggy", *FIXES)),
    repeated(
        Claim(
            "DL-4",
            "Under load the parsed cycles include more than 2 processes",
            ("buggy",),
            _long_cycles,
            published="4 processes with ExclusiveLock on tuple hops",
            profiles=("published",),
        ),
        trials=3,
        required=2 / 3,
    ),
    *CHECKOUT_SECONDS,  # the published seconds, under the node-* cases
)

SCENARIO = Scenario(
    id="checkout-deadlock",
    validate=validate,
    doc=__doc__ or "",
    kind="actors",
    variants={"buggy": buggy, "fixed": fixed, "fixed-lock-first": fixed_lock_first},
    outcomes=("ok", "40P01", "40001"),
    claims=CLAIMS,
    published={
        "buggy": '{"ok":4,"40P01":196} in 99403 ms (n=200); {"ok":9,"40P01":31} in 20.7 s (n=40)',
        "fixed": '{"ok":200} in 10955 ms (n=200); {"ok":40} in 6.1 s (n=40)',
    },
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=200, arrival="burst", actor_timeout_s=300, run_timeout_s=900),
    params={"step_pause_ms": 5.0, "isolation": "read_committed"},
    param_help={
        "step_pause_ms": "pause between the two UPDATEs (the 'other logic' of the checkout)",
        "isolation": "transaction isolation: " + ", ".join(ISOLATION_LEVELS),
    },
    sources=("DL", "LC"),
    quick={"n": 40, "deadlock_timeout_ms": 100},
    cases={
        SHORT: {"n": 20, "deadlock_timeout_ms": 250},
        LONG: {"n": 20, "deadlock_timeout_ms": 1000},
        "repeatable-read": {**FORCED, "isolation": "repeatable_read"},
        "serializable": {**FORCED, "isolation": "serializable"},
        **CHECKOUT_CASES,  # node-200, node-40: the documents' network and pool
    },
)
