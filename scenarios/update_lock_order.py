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
See:        claim LC-1. The plans are forced per session with SET LOCAL enable_* (in a real
            service they differ by statistics, parameters, or generic vs custom plans): `index`
            gives the UPDATE a nested loop over the list, `seq-scan` a hash join over a seq
            scan of inventory, where 202 is stored before 101. Lock order is read without
            timing: a holder keeps 101 locked, the statement runs until the server shows it
            blocked, and a SKIP LOCKED probe sees whether 202 was already taken. The pair of
            checkouts (one per plan) is gated by a BEFORE UPDATE trigger that waits on an
            advisory lock the lab holds: each session stops right after locking its first
            row, the lab sees both blocked on the gate, then opens it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import asyncpg

from lab.claims import Claim, Record, all_ok, deadlocks, invariants_hold
from lab.errors import LabError, ScenarioFailure
from lab.interleave import task_or_blocked
from lab.outcome import notation
from lab.scenario import Check, Defaults, Env, Scenario

FIRST, SECOND = 101, 202  # the cart, sorted; 202 is stored first (see setup)
ITEMS = (FIRST, SECOND)
GATE = 4242  # advisory lock key of the trigger gate
PADDING = 2000  # other products, so a seq scan + hash of the 2-row list is the cheap join
# plan -> SET LOCAL settings that force it, for the UPDATE join and for the fixed SELECT
PLANS: dict[str, tuple[str, ...]] = {
    "index": ("enable_seqscan", "enable_bitmapscan", "enable_hashjoin", "enable_mergejoin"),
    "seq-scan": ("enable_indexscan", "enable_indexonlyscan", "enable_bitmapscan",
                 "enable_nestloop", "enable_mergejoin"),
}  # fmt: skip
UPDATE = (
    "UPDATE inventory i SET stock = i.stock - v.qty "
    f"FROM (VALUES ({FIRST}, 1), ({SECOND}, 1)) AS v(product_id, qty) "
    "WHERE i.product_id = v.product_id"
)
LOCK_FIRST = (
    "SELECT product_id FROM inventory WHERE product_id = ANY($1::int[]) "
    "ORDER BY product_id FOR NO KEY UPDATE"
)
PROBE = "SELECT product_id FROM inventory WHERE product_id = ANY($1::int[]) FOR UPDATE SKIP LOCKED"
SORTED, UNSORTED = "sorted", "unsorted"


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE inventory (product_id int PRIMARY KEY, stock int NOT NULL)")
    # 202 goes in first, so a seq scan meets it before 101; the padding comes after both.
    await env.db.execute(
        "INSERT INTO inventory SELECT id, 1000 FROM unnest($1::int[]) id",
        [SECOND, FIRST, *range(1000, 1000 + PADDING)],
    )
    await env.db.execute(
        f"CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"PERFORM pg_advisory_xact_lock_shared({GATE}); RETURN NEW; END $$"
    )
    await env.db.execute(
        "CREATE TRIGGER gate BEFORE UPDATE ON inventory FOR EACH ROW EXECUTE FUNCTION gate()"
    )
    await env.db.execute("ANALYZE inventory")


async def invariant(env: Env) -> list[Check]:
    """Each committed checkout took one unit of both products; a deadlock loser none."""
    rows = await env.db.fetch(
        "SELECT product_id, stock FROM inventory WHERE product_id = ANY($1::int[])", list(ITEMS)
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


def validate(n: int, p: Mapping[str, Any]) -> None:
    if n != 2:
        raise LabError(f"-n {n}: this scenario is one pair of checkouts, -n 2")


Statement = Callable[[asyncpg.Connection], Coroutine[Any, Any, None]]


async def _buggy_statement(conn: asyncpg.Connection) -> None:
    await conn.execute(UPDATE)


async def _fixed_statement(conn: asyncpg.Connection) -> None:
    await conn.fetch(LOCK_FIRST, list(ITEMS))
    await conn.execute(UPDATE)  # every row it touches is already locked, in order


async def buggy(env: Env) -> None:
    await _run(env, _buggy_statement, UPDATE)


async def fixed(env: Env) -> None:
    await _run(env, _fixed_statement, LOCK_FIRST)


async def _run(env: Env, statement: Statement, first_sql: str) -> None:
    orders = {plan: await _lock_order(env, statement, plan) for plan in PLANS}
    plans = {plan: await _explain(env, first_sql, plan) for plan in PLANS}
    for plan, order in orders.items():
        env.trace("lab", "lock order", plan=plan, order=order, plan_nodes=plans[plan])
        env.add(f"{SORTED if order == list(ITEMS) else UNSORTED}_plans")
    env.extra_evidence["lock_order"] = orders
    env.extra_evidence["plans"] = plans
    for word in await _pair(env, statement):
        env.outcome(word)


def _settings(plan: str) -> list[str]:
    return [f"SET LOCAL {name} = off" for name in PLANS[plan]]


async def _explain(env: Env, sql: str, plan: str) -> list[str]:
    """The plan's node names, outermost first (EXPLAIN, not run)."""
    async with env.db.acquire() as conn, conn.transaction():
        for s in _settings(plan):
            await conn.execute(s)
        rows = await conn.fetch(
            f"EXPLAIN (COSTS OFF) {sql}", *([list(ITEMS)] if "$1" in sql else [])
        )
    nodes = [r[0].strip().removeprefix("->").strip() for r in rows]
    return [node for node in nodes if ": " not in node]  # not Filter:, Sort Key:, ...


async def _lock_order(env: Env, statement: Statement, plan: str) -> list[int]:
    """The order `statement` locks the two rows in under `plan`: a holder keeps 101; once
    the statement waits for it, 202 is locked already (202 first) or not (101 first)."""
    holder, session = await env.connect(), await env.connect()
    task: asyncio.Task[None] | None = None
    try:
        await holder.execute("BEGIN")
        await holder.execute(f"SELECT 1 FROM inventory WHERE product_id = {FIRST} FOR UPDATE")
        await session.execute("BEGIN")
        for s in _settings(plan):
            await session.execute(s)
        task = asyncio.create_task(statement(session))
        blockers = await task_or_blocked(env.db, session.get_server_pid(), task, what=plan)
        if blockers != [holder.get_server_pid()]:
            raise ScenarioFailure(
                f"{env.scenario} / {env.variant}: {plan} did not wait for {FIRST}"
            )
        async with env.db.acquire() as probe, probe.transaction():
            free = {r[0] for r in await probe.fetch(PROBE, [SECOND])}
        await holder.execute("ROLLBACK")
        await task
        await session.execute("ROLLBACK")
    finally:
        if task is not None and not task.done():
            task.cancel()
        holder.terminate()
        session.terminate()
    return [FIRST, SECOND] if SECOND in free else [SECOND, FIRST]


async def _pair(env: Env, statement: Statement) -> list[str]:
    """One checkout per plan, each stopped by the gate right after its first row lock
    (the fixed one: after its SELECT ... FOR NO KEY UPDATE); then the gate opens."""
    gate = await env.connect()
    sessions = {plan: await env.connect() for plan in PLANS}
    tasks: dict[str, asyncio.Task[str]] = {}
    try:
        await gate.execute(f"SELECT pg_advisory_lock({GATE})")
        for plan, conn in sessions.items():
            tasks[plan] = asyncio.create_task(_checkout(conn, plan, statement))
            blockers = await task_or_blocked(env.db, conn.get_server_pid(), tasks[plan], what=plan)
            env.trace(
                plan, "blocked", by="gate" if blockers == [gate.get_server_pid()] else blockers
            )
        async with env.db.acquire() as probe, probe.transaction():
            free = [r[0] for r in await probe.fetch(PROBE, list(ITEMS))]
        env.trace("lab", "gate opens", rows_free=free)
        await gate.execute(f"SELECT pg_advisory_unlock({GATE})")
        words = [await tasks[plan] for plan in PLANS]
    finally:
        for t in tasks.values():
            if not t.done():
                t.cancel()
        for conn in (gate, *sessions.values()):
            conn.terminate()
    for plan, word in zip(PLANS, words, strict=True):
        env.trace(plan, word)
    return words


async def _checkout(conn: asyncpg.Connection, plan: str, statement: Statement) -> str:
    try:
        async with conn.transaction():
            for s in _settings(plan):
                await conn.execute(s)
            await statement(conn)
        return "ok"
    except asyncpg.DeadlockDetectedError:
        return "40P01"


# --- claims -------------------------------------------------------------------------------


def _orders(rec: Record) -> str:
    ev = rec["evidence"]
    return "; ".join(
        f"{plan} [{', '.join(ev['plans'][plan][1:])}]: {' then '.join(map(str, order))}"
        for plan, order in ev["lock_order"].items()
    )


def _plan_dependent(records: Mapping[str, Record]) -> tuple[bool, str]:
    orders = records["buggy"]["evidence"]["lock_order"]
    held = [FIRST, SECOND] in orders.values() and [SECOND, FIRST] in orders.values()
    return held, f"buggy: {_orders(records['buggy'])}"


def _returned_order(records: Mapping[str, Record]) -> tuple[bool, str]:
    orders = records["fixed"]["evidence"]["lock_order"]
    held = bool(orders) and all(o == [FIRST, SECOND] for o in orders.values())
    return held, f"fixed: {_orders(records['fixed'])}"


def _pair_deadlocks(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    return rec["outcomes"] == {"ok": 1, "40P01": 1}, f"buggy: {notation(rec['outcomes'])}"


CLAIMS = (
    Claim(
        "LC-1",
        "buggy: the same UPDATE ... FROM (VALUES sorted list) locks 101 first under one plan "
        "and 202 first under another",
        ("buggy",),
        _plan_dependent,
        published="Thứ tự mà một câu UPDATE khoá row phụ thuộc vào plan (join order, index hay "
        "seq scan), nên không được đảm bảo.",
    ),
    Claim(
        "LC-1",
        "buggy: two checkouts with the same sorted list deadlock when their plans differ",
        ("buggy",),
        _pair_deadlocks,
    ),
    deadlocks("LC-1", "buggy", "buggy: the server reports the deadlock", expect=True),
    invariants_hold("LC-1", "buggy", "buggy: stock moved once per committed checkout"),
    Claim(
        "LC-1",
        "fixed: SELECT ... ORDER BY ... FOR NO KEY UPDATE locks in the order it returns rows, "
        "under every plan",
        ("fixed",),
        _returned_order,
        published="SELECT ... ORDER BY ... FOR UPDATE thì khoá theo thứ tự row được trả về.",
    ),
    all_ok("LC-1", "fixed", "fixed: both checkouts succeed"),
    deadlocks("LC-1", "fixed", "fixed: zero deadlocks", expect=False),
    invariants_hold("LC-1", "fixed", "fixed: stock moved once per committed checkout"),
)

SCENARIO = Scenario(
    id="update-lock-order",
    doc=__doc__ or "",
    kind="script",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("ok", "40P01"),
    claims=CLAIMS,
    published={
        "buggy": "UPDATE ... FROM (VALUES ...): thứ tự khoá phụ thuộc vào plan",
        "fixed": "SELECT ... ORDER BY ... FOR UPDATE: khoá theo thứ tự row được trả về",
    },
    setup=setup,
    invariant=invariant,
    validate=validate,
    defaults=Defaults(n=2, run_timeout_s=60),
    quick={"deadlock_timeout_ms": 100},
    sources=("LC",),
    script_connections=lambda n: 3,  # at most at once: the gate and the pair
)
