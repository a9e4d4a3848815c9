"""FK lock modes: a parent locked FOR UPDATE "to be safe" blocks every child INSERT.

Symptom:    while one request marks order 42 paid, inserts into order_items for order 42
            hang, and so does an unrelated update of the order's customer; two requests
            adding items to two orders deadlock.
Root cause: the FK check of a child INSERT takes FOR KEY SHARE on the parent row, which
            conflicts only with FOR UPDATE. `SELECT ... FOR UPDATE` takes the strongest row
            lock although the key does not change, and on a join it locks the rows of every
            joined table. Two transactions that each hold KEY SHARE on one parent (a child
            inserted) and then ask FOR UPDATE on the other's parent wait for each other.
Fix:        lock only the table you change, only as strongly as you change it:
            `FOR NO KEY UPDATE OF o` (what a plain UPDATE of status takes).
Published:  "Bẫy thực tế: app viết SELECT * FROM orders WHERE id = 42 FOR UPDATE "cho chắc"
            trước khi sửa status. FOR UPDATE xung đột với FOR KEY SHARE, nên giờ mọi insert
            order_items cho order đó phải chờ. Nếu không đổi key, hãy dùng FOR NO KEY
            UPDATE." "SELECT ... FROM orders JOIN customers ... FOR UPDATE khoá row của cả
            hai. Dùng FOR UPDATE OF orders để chỉ khoá table cần." "hai transaction cùng
            insert con cho cha A và B theo thứ tự ngược nhau, rồi cùng update cha, sẽ
            deadlock qua FOR KEY SHARE → FOR NO KEY UPDATE." (PostgreSQL 17.11)
            — locking-concurrency-control.vi.txt
See:        claims LC-11, LC-13, LC-15. Steps, the same in both variants: the holder locks
            order 42 joined with its customer (the variant's lock clause), sets it paid and
            stays open; a child INSERT for order 42 and an UPDATE of customer 7 start; each
            either finishes or is shown blocked by the server; snapshot; the holder
            commits. Then T1 inserts an item of order 1, T2 of order 2, T1 locks order 2
            (finished or blocked), T2 locks order 1, survivors update their parent and
            commit. Caveat: on PostgreSQL 17 the FK deadlock needs a key-strength lock
            (FOR UPDATE) on the parents; a plain UPDATE takes FOR NO KEY UPDATE, which does
            not conflict with FOR KEY SHARE, so "→ FOR NO KEY UPDATE" does not deadlock
            (fixed shows it). deadlock_timeout defaults to 100 ms here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import asyncpg

from lab.claims import Claim, Record, deadlocks, invariants_hold
from lab.errors import ScenarioFailure
from lab.evidence import blocking_tree
from lab.interleave import TIMEOUT_S, task_or_blocked
from lab.scenario import Check, Defaults, Env, Scenario

ORDER, CUSTOMER = 42, 7
ORDER_A, ORDER_B = 1, 2  # the FK-deadlock pair, each with its own customer
LOCK_ORDER = """
SELECT o.id, o.status, c.name FROM orders o JOIN customers c ON c.id = o.customer_id
WHERE o.id = $1 {clause}
"""
PROBES = {
    "child": f"INSERT INTO order_items (order_id, sku, qty) VALUES ({ORDER}, 'SKU-1', 1)",
    "customer": f"UPDATE customers SET name = 'An Nguyen' WHERE id = {CUSTOMER}",
}
ADD_ITEM = "INSERT INTO order_items (order_id, sku, qty) VALUES ($1, 'SKU-2', 1)"


async def setup(env: Env) -> None:
    for ddl in (
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL)",
        "CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL,"
        " status text NOT NULL DEFAULT 'new', total int NOT NULL DEFAULT 0)",
        "CREATE TABLE order_items (id serial PRIMARY KEY,"
        " order_id int NOT NULL REFERENCES orders (id), sku text NOT NULL, qty int NOT NULL)",
        f"INSERT INTO customers VALUES ({CUSTOMER}, 'An'), ({ORDER_A}, 'Binh'), ({ORDER_B}, 'Chi')",
        f"INSERT INTO orders (id, customer_id) VALUES ({ORDER}, {CUSTOMER}),"
        f" ({ORDER_A}, {ORDER_A}), ({ORDER_B}, {ORDER_B})",
    ):
        await env.db.execute(ddl)


async def buggy(env: Env) -> None:
    await _run(env, "FOR UPDATE")


async def fixed(env: Env) -> None:
    await _run(env, "FOR NO KEY UPDATE OF o")  # the whole fix


async def _run(env: Env, clause: str) -> None:
    try:
        env.extra_evidence["probes"] = await _parent_held(env, clause)
        env.extra_evidence["fk_deadlock"] = await _opposite_parents(env, clause)
    except asyncpg.PostgresError as exc:
        raise ScenarioFailure(f"{env.scenario} / {env.variant}: {exc!r}") from exc


async def _parent_held(env: Env, clause: str) -> dict[str, Any]:
    """LC-11, LC-13: who waits while the holder has order 42 locked and set paid."""
    holder, observer = await env.connect(), await env.connect()
    probes = {name: await env.connect() for name in PROBES}
    out: dict[str, Any] = {"holder_pid": holder.get_server_pid()}
    try:
        await holder.execute("BEGIN")
        await holder.execute(LOCK_ORDER.format(clause=clause), ORDER)
        await holder.execute("UPDATE orders SET status = 'paid' WHERE id = $1", ORDER)
        env.trace("holder", f"locked order {ORDER} {clause}, set it paid, stays open")
        tasks = {name: asyncio.create_task(c.execute(PROBES[name])) for name, c in probes.items()}
        settled = await asyncio.gather(
            *(task_or_blocked(env.db, probes[n].get_server_pid(), tasks[n], what=n) for n in PROBES)
        )
        env.extra_evidence["blocking_tree"] = await blocking_tree(observer, env.database)
        for name, blockers in zip(PROBES, settled, strict=True):
            out[name] = {"blocked_by": blockers, "done_while_holder_open": tasks[name].done()}
            env.trace(name, "blocked" if blockers else "done", blocked_by=blockers)
        await holder.execute("COMMIT")
        env.trace("holder", "commit")
        await asyncio.gather(*tasks.values())
    finally:
        for c in (holder, observer, *probes.values()):
            c.terminate()
    for name in PROBES:
        env.outcome("ok" if out[name]["blocked_by"] is None else "blocked")
    return out


async def _opposite_parents(env: Env, clause: str) -> dict[str, Any]:
    """LC-15: T1 adds an item to order A, T2 to order B; then each locks the other's parent."""
    t1, t2 = await env.connect(), await env.connect()
    try:
        for who, conn, order in (("T1", t1, ORDER_A), ("T2", t2, ORDER_B)):
            await conn.execute("BEGIN")
            await conn.execute(ADD_ITEM, order)
            env.trace(who, f"added an item to order {order}")
        first = asyncio.create_task(_update_parent(t1, ORDER_B, clause))
        t1_blocked_by = await task_or_blocked(
            env.db, t1.get_server_pid(), first, what=f"T1 locking order {ORDER_B}"
        )
        env.trace("T1", f"locking order {ORDER_B}", blocked_by=t1_blocked_by)
        second = asyncio.create_task(_update_parent(t2, ORDER_A, clause))
        env.trace("T2", f"locking order {ORDER_A}")
        results = await asyncio.wait_for(
            asyncio.gather(first, second, return_exceptions=True), TIMEOUT_S
        )
        ends = {}
        for who, conn, res in (("T1", t1, results[0]), ("T2", t2, results[1])):
            if isinstance(res, asyncpg.DeadlockDetectedError):
                await conn.execute("ROLLBACK")
                ends[who] = "40P01"
            elif isinstance(res, BaseException):
                raise res
            else:
                await conn.execute("COMMIT")
                env.add("parent_updates")
                ends[who] = "ok"
            env.outcome(ends[who])
            env.trace(who, ends[who])
    finally:
        t1.terminate()
        t2.terminate()
    return {"t1_blocked_by": t1_blocked_by, "ends": ends}


async def _update_parent(conn: asyncpg.Connection, order: int, clause: str) -> None:
    await conn.execute(LOCK_ORDER.format(clause=clause), order)
    await conn.execute("UPDATE orders SET total = total + 1 WHERE id = $1", order)


async def invariant(env: Env) -> list[Check]:
    row = await env.db.fetchrow(
        "SELECT (SELECT count(*) FROM order_items WHERE order_id = $1) AS items,"
        " (SELECT status FROM orders WHERE id = $1) AS status,"
        " (SELECT sum(total) FROM orders WHERE id IN ($2, $3)) AS updates",
        ORDER,
        ORDER_A,
        ORDER_B,
    )
    assert row is not None
    updates = env.counters.get("parent_updates", 0)
    return [
        Check(
            f"the child INSERT for order {ORDER} committed, waiting or not",
            row["items"] == 1,
            f"{row['items']} item(s) of order {ORDER}",
        ),
        Check(f"order {ORDER} is paid", row["status"] == "paid", f"status {row['status']}"),
        Check(
            "each committed transaction of the pair updated one parent once",
            row["updates"] == updates,
            f"parents' total {row['updates']}, committed {updates}",
        ),
    ]


# --- claims -------------------------------------------------------------------------------


def _probe(
    variant: str, name: str, *, blocks: bool
) -> Callable[[Mapping[str, Record]], tuple[bool, str]]:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        probes = records[variant]["evidence"]["probes"]
        p, holder = probes[name], probes["holder_pid"]
        if blocks:
            held = bool(p["blocked_by"]) and holder in p["blocked_by"]
        else:
            held = p["blocked_by"] is None and p["done_while_holder_open"]
        seen = (
            f"blocked by the holder (pg_blocking_pids {p['blocked_by']}, holder {holder})"
            if p["blocked_by"]
            else "finished while the holder still held its lock"
        )
        return held, f"{variant}: {PROBES[name]} → {seen}"

    return check


CLAIMS = (
    Claim(
        "LC-11",
        "buggy: SELECT ... FOR UPDATE on the parent blocks a child INSERT (FOR KEY SHARE)",
        ("buggy",),
        _probe("buggy", "child", blocks=True),
        published="FOR UPDATE xung đột với FOR KEY SHARE, nên giờ mọi insert order_items cho "
        "order đó phải chờ.",
    ),
    Claim(
        "LC-11",
        "fixed: FOR NO KEY UPDATE and the UPDATE of status do not block a child INSERT",
        ("fixed",),
        _probe("fixed", "child", blocks=False),
        published="một transaction khác đang UPDATE orders SET status = 'paid' WHERE id = 42 "
        "(lấy FOR NO KEY UPDATE) không chặn insert item",
    ),
    Claim(
        "LC-13",
        "buggy: FOR UPDATE on orders JOIN customers locks the customer's row too",
        ("buggy",),
        _probe("buggy", "customer", blocks=True),
        published="SELECT ... FROM orders JOIN customers ... FOR UPDATE khoá row của cả hai.",
    ),
    Claim(
        "LC-13",
        "fixed: FOR ... OF o locks only orders; the customer's row stays free",
        ("fixed",),
        _probe("fixed", "customer", blocks=False),
        published="Dùng FOR UPDATE OF orders để chỉ khoá table cần.",
    ),
    deadlocks(
        "LC-15",
        "buggy",
        "buggy: items added to A and B, then FOR UPDATE on the other's parent: deadlock",
        expect=True,
        published="hai transaction cùng insert con cho cha A và B theo thứ tự ngược nhau, rồi "
        "cùng update cha, sẽ deadlock qua FOR KEY SHARE → FOR NO KEY UPDATE.",
    ),
    deadlocks(
        "LC-15",
        "fixed",
        "fixed: the same steps with FOR NO KEY UPDATE do not deadlock on PostgreSQL 17 "
        "(NO KEY UPDATE does not conflict with KEY SHARE)",
        expect=False,
    ),
    *(
        invariants_hold("LC-11", v, f"{v}: every committed write landed once")
        for v in ("buggy", "fixed")
    ),
)

SCENARIO = Scenario(
    id="fk-lock-modes",
    doc=__doc__ or "",
    kind="script",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("ok", "blocked", "40P01"),
    claims=CLAIMS,
    published={
        "buggy": "FOR UPDATE xung đột với FOR KEY SHARE, nên giờ mọi insert order_items cho "
        "order đó phải chờ.",
        "fixed": "UPDATE orders SET status = 'paid' WHERE id = 42 (lấy FOR NO KEY UPDATE) "
        "không chặn insert item",
    },
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=1, deadlock_timeout_ms=100, run_timeout_s=60),
    sources=("LC",),
)
