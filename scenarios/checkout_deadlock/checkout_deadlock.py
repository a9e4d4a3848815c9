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
See:        claims DL-1..DL-5 in claims.py; expected/ has the schedules' transcripts;
            docs/arrival.md for what arrival does to wall time.
"""

from __future__ import annotations

from lab.core.scenario import Check, Env, Pgbench
from lab.core.steps import ISOLATION_LEVELS, Pinned, Session

SKUS = ("A-1", "B-2")
STEP = {"A-1": "lock-a", "B-2": "lock-b"}  # the step that updates (and so locks) a SKU's row
INITIAL_QTY = 1_000_000
TAKE = "UPDATE inventory SET qty = qty - 1 WHERE sku = $1"
LOCK_ALL = "SELECT sku FROM inventory WHERE sku = ANY($1) ORDER BY sku FOR NO KEY UPDATE"


SCHEMA = "CREATE TABLE inventory (sku text PRIMARY KEY, qty int NOT NULL)"


async def schema(env: Env) -> None:
    await env.db.execute(SCHEMA)


async def setup(env: Env) -> None:
    await env.db.executemany(
        "INSERT INTO inventory VALUES ($1, $2)", [(s, INITIAL_QTY) for s in SKUS]
    )


def cart(s: Session) -> list[str]:
    """Half the carts (s1, s3, ...) hold [A-1, B-2], the other half the same SKUs reversed."""
    return list(SKUS) if s.index % 2 == 0 else list(reversed(SKUS))


async def _checkout(env: Env, s: Session, skus: list[str], lock_first: bool = False) -> str:
    async with s.transaction(isolation=env.params["isolation"]):
        if lock_first:
            await s.execute("lock-all", LOCK_ALL, skus)
        for sku in skus:
            await s.execute(STEP[sku], TAKE, sku)
            await s.other_logic(env.params["step_pause_ms"] / 1000)  # inside the transaction
    return "ok"


async def buggy(env: Env, s: Session) -> str:
    return await _checkout(env, s, cart(s))


async def fixed(env: Env, s: Session) -> str:
    return await _checkout(env, s, sorted(cart(s)))  # the whole fix


async def fixed_lock_first(env: Env, s: Session) -> str:
    return await _checkout(env, s, cart(s), lock_first=True)


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


# --- pinned: two carts, s1 in cart order [A-1, B-2], s2 reversed -------------------------

AB, BA = ("lock-a", "lock-b", "commit"), ("lock-b", "lock-a", "commit")
PINNED = Pinned(
    code={"buggy": buggy, "fixed": fixed, "fixed-lock-first": fixed_lock_first},
    steps={
        "buggy": {"s1": AB, "s2": BA},
        "fixed": {"s1": AB, "s2": AB},
        "fixed-lock-first": {"s1": ("lock-all", *AB), "s2": ("lock-all", *BA)},
    },
    schedules={
        # each cart takes its first row before either asks for its second: the cycle
        "buggy": {
            "cross": ("s1 lock-a", "s2 lock-b", "s1 lock-b", "s2 lock-a", "s1 commit", "s2 commit"),
            "serial": (
                "s1 lock-a",
                "s1 lock-b",
                "s1 commit",
                "s2 lock-b",
                "s2 lock-a",
                "s2 commit",
            ),
        },
        # the same start, sorted: s2 waits for its first row instead of holding one
        "fixed": {
            "cross": ("s1 lock-a", "s2 lock-a", "s1 lock-b", "s1 commit", "s2 lock-b", "s2 commit")
        },
        "fixed-lock-first": {
            "cross": (
                "s1 lock-all",
                "s2 lock-all",
                "s1 lock-a",
                "s1 lock-b",
                "s1 commit",
                "s2 lock-b",
                "s2 lock-a",
                "s2 commit",
            ),
        },
    },
    isolation=ISOLATION_LEVELS,
)


def pgbench_script(skus: tuple[str, ...], pause_ms: float) -> str:
    """The fixed checkout in pgbench's script language: the sorted UPDATEs, a pause after each."""
    lines = ["BEGIN;"]
    for sku in sorted(skus):
        lines.append(f"UPDATE inventory SET qty = qty - 1 WHERE sku = '{sku}';")
        lines.append(f"\\sleep {int(pause_ms * 1000)} us")
    return "\n".join([*lines, "COMMIT;"]) + "\n"


ROWS = ", ".join(f"('{sku}', {INITIAL_QTY})" for sku in SKUS)
PGBENCH = Pgbench((SCHEMA, f"INSERT INTO inventory VALUES {ROWS}"), pgbench_script(SKUS, 5.0))
