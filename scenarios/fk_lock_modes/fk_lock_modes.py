"""FK lock modes: a parent locked FOR UPDATE "to be safe" blocks every child INSERT.

Symptom:    while one request marks order 42 paid, inserts into order_items for order 42
            hang, and so does an unrelated update of the order's customer; two requests
            that each add an item and then lock the order deadlock.
Root cause: the FK check of a child INSERT takes FOR KEY SHARE on the parent row, which
            conflicts only with FOR UPDATE. `SELECT ... FOR UPDATE` takes the strongest row
            lock although the key does not change, and on a join it locks the rows of every
            joined table. Two transactions that each hold KEY SHARE on the parent (a child
            inserted) and then ask FOR UPDATE on it wait for each other.
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
See:        claims LC-11, LC-13, LC-15 in claims.py; expected/ has the schedules'
            transcripts. s1 adds an item to order 42, locks the order joined with its
            customer (the variant's lock clause) and sets it paid. s2, a second request of
            the same customer, renames the customer (its own statement), then adds an item
            and locks the order to check it is still open. Caveat: the cycle here is on one
            parent (PostgreSQL's own fk-deadlock spec); on PostgreSQL 17 it needs a
            key-strength lock (FOR UPDATE): a plain UPDATE takes FOR NO KEY UPDATE, which
            does not conflict with FOR KEY SHARE, so "→ FOR NO KEY UPDATE" does not
            deadlock (fixed shows it). In the cross the first waiter's check runs first,
            so s1 is the victim when the cycle closes well inside deadlock_timeout (the
            golden test runs it at 3 s); verify quick runs every interleaving at 100 ms.
"""

from __future__ import annotations

from lab.core.scenario import Check, Env, executes
from lab.core.steps import Pinned, Session, schedule

ORDER, CUSTOMER = 42, 7
LOCK = (
    "SELECT o.id, o.status, c.name FROM orders o JOIN customers c ON c.id = o.customer_id"
    " WHERE o.id = $1 {clause}"
)
BUGGY_LOCK, FIXED_LOCK = "FOR UPDATE", "FOR NO KEY UPDATE OF o"  # the whole fix
ADD_ITEM = "INSERT INTO order_items (order_id, sku) VALUES ($1, $2)"
PAY = "UPDATE orders SET status = 'paid' WHERE id = $1"
RENAME = "UPDATE customers SET name = 'An Nguyen' WHERE id = $1"


schema = executes(
    "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL)",
    "CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL REFERENCES"
    " customers (id), status text NOT NULL DEFAULT 'new')",
    "CREATE TABLE order_items (id serial PRIMARY KEY,"
    " order_id int NOT NULL REFERENCES orders (id), sku text NOT NULL)",
)


async def setup(env: Env) -> None:
    await env.db.execute(f"INSERT INTO customers VALUES ({CUSTOMER}, 'An')")
    await env.db.execute(f"INSERT INTO orders (id, customer_id) VALUES ({ORDER}, {CUSTOMER})")


async def _request(s: Session, clause: str, pause_s: float = 0.0) -> str:
    """Even sessions pay the order; odd ones are the customer's second request."""
    payer = s.index % 2 == 0
    if not payer:  # an unrelated update of the order's customer, committed on its own
        await s.execute("rename", RENAME, CUSTOMER)
    async with s.transaction():
        await s.execute("add-item", ADD_ITEM, ORDER, "GIFT-WRAP" if payer else "SKU-2")
        await s.other_logic(pause_s)
        await s.fetchrow("lock", LOCK.format(clause=clause), ORDER)  # "to be safe"
        if payer:
            await s.execute("pay", PAY, ORDER)
    return "paid" if payer else "ok"


async def buggy(env: Env, s: Session) -> str:
    return await _request(s, BUGGY_LOCK)


async def fixed(env: Env, s: Session) -> str:
    return await _request(s, FIXED_LOCK)


async def item_then_pause(env: Env, s: Session) -> str:
    """Not a variant: buggy with 20 ms of other logic between its item and its lock, so that
    under a load both requests hold their item before either locks (the cross, every run).
    The code mutant (lab.core.mutants.commits_partial) needs that item before the 40P01."""
    return await _request(s, BUGGY_LOCK, pause_s=0.02)


async def invariant(env: Env) -> list[Check]:
    """Every committed request left its item; the order is paid iff a payer committed."""
    row = await env.db.fetchrow(
        "SELECT (SELECT count(*) FROM order_items WHERE order_id = $1) AS items,"
        " (SELECT status FROM orders WHERE id = $1) AS status",
        ORDER,
    )
    assert row is not None
    paid, ok = env.outcomes.get("paid", 0), env.outcomes.get("ok", 0)
    return [
        Check(
            "one item per committed request",
            row["items"] == paid + ok,
            f"{row['items']} item(s), {paid + ok} committed",
        ),
        Check(
            f"order {ORDER} paid iff a payer committed",
            (row["status"] == "paid") == (paid > 0),
            f"status {row['status']}, payers committed {paid}",
        ),
    ]


# --- pinned: s1 pays order 42, s2 is the customer's second request -----------------------
PAYER, OTHER = ("add-item", "lock", "pay", "commit"), ("rename", "add-item", "lock", "commit")
STEPS = {"s1": PAYER, "s2": OTHER}
SCHEDULES = {
    # s1 holds its lock; s2's child INSERT asks FOR KEY SHARE on the same order
    "parent-locked": schedule(
        "s2 rename, s1 add-item, s1 lock, s2 add-item, s1 pay, s1 commit, s2 lock, s2 commit"
    ),
    # s1 holds its lock; s2 updates the customer the lock's join touched
    "customer-locked": schedule(
        "s1 add-item, s1 lock, s2 rename, s1 pay, s1 commit, s2 add-item, s2 lock, s2 commit"
    ),
    # both hold KEY SHARE (a child each), then both lock the parent
    "cross": schedule(
        "s2 rename, s1 add-item, s2 add-item, s1 lock, s2 lock, s1 pay, s1 commit, s2 commit"
    ),
}
PINNED = Pinned(
    code={"buggy": buggy, "fixed": fixed},
    steps={"buggy": STEPS, "fixed": STEPS},
    schedules={v: SCHEDULES for v in ("buggy", "fixed")},
)
