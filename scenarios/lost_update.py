"""Lost update: two buyers read stock 1, both see enough, both write stock 0.

Symptom:    product 101 has one unit left; two checkouts arrive together and both
            succeed: two orders, stock 0. One decrement "vanished".
Root cause: read, compute in the app, write the computed value (SET stock = $computed).
            At READ COMMITTED a plain SELECT takes no lock, so BEGIN ... COMMIT around
            the three steps does not help: both transactions read 1 before either writes.
            The second UPDATE waits for the first one's row lock, then overwrites 0 with 0.
Fix:        atomic guarded UPDATE ... SET stock = stock - $1 WHERE ... AND stock >= $1,
            rowcount 0 → out_of_stock (fixed): the waiter re-evaluates WHERE on the new
            row version; or SELECT ... FOR NO KEY UPDATE first (fixed-for-update): the
            second buyer waits in its read and reads the new stock; or a version column,
            UPDATE ... WHERE version = $read (fixed-optimistic): UPDATE 0 → 409 conflict.
            At REPEATABLE READ the waiter does not re-evaluate: it fails with 40001
            (-p isolation=repeatable_read), so code that raises the level must retry.
Published:  read-compute-write: "Cả hai request đọc stock = 1, cả hai thấy đủ hàng, cả hai
            ghi stock = 0 và cả hai tạo order. Bạn vừa bán 2 chiếc khi chỉ có 1." (both
            read 1, both write 0 and create an order: 2 sold when there was 1). Atomic
            UPDATE, stock 1, called twice in parallel: [ { status: 'fulfilled', value: 0 },
            { status: 'rejected', reason: Error: OUT_OF_STOCK } ]. FOR NO KEY UPDATE: the
            second transaction waits in the SELECT until the first commits, then reads the
            new value. Version column: "Người thứ nhất lưu: UPDATE 1 (version 7 → 8)",
            "Người thứ hai lưu với version=7: UPDATE 0 → 409 Conflict". No timings are
            published (PostgreSQL 17.11, Node 24 + node-postgres)
            — locking-concurrency-control.vi.txt, "Bối cảnh & vấn đề", "Ba cách chống lost update"
See:        claims LC-4..LC-8; lab/interleave.py (the rendezvous that forces the interleaving).

Forced interleaving, the same for every variant: each buyer opens its transaction and
reads; nobody writes until every buyer has read or is blocked in its read (the locking
read blocks); after writing, a buyer commits only once every other buyer is blocked
behind it (or done), so the second writer always meets an uncommitted first write.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import asyncpg

from lab.claims import Claim, Record, invariant_broken, invariants_hold
from lab.errors import LabError
from lab.interleave import Rendezvous
from lab.scenario import Check, Defaults, Env, Scenario

PRODUCT = 101
INITIAL_VERSION = 7  # the document's form opened at version 7
POINTS = ("read", "write")  # a buyer has read / has written (not yet committed)
ISOLATION_LEVELS = ("read_committed", "repeatable_read", "serializable")

READ = "SELECT stock, version FROM inventory WHERE product_id = $1"
READ_LOCKED = READ + " FOR NO KEY UPDATE"
WRITE_COMPUTED = "UPDATE inventory SET stock = $1 WHERE product_id = $2"
WRITE_GUARDED = (
    "UPDATE inventory SET stock = stock - $1 WHERE product_id = $2 AND stock >= $1 RETURNING stock"
)
WRITE_VERSIONED = (
    "UPDATE inventory SET stock = $1, version = version + 1 WHERE product_id = $2 AND version = $3"
)
ORDER = "INSERT INTO orders (product_id, buyer, qty) VALUES ($1, $2, $3)"

# One rendezvous per run (per Env), gone with it.
_RUNS: weakref.WeakKeyDictionary[Env, Rendezvous] = weakref.WeakKeyDictionary()


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["isolation"] not in ISOLATION_LEVELS:
        raise LabError(f"-p isolation={p['isolation']!r}: one of {', '.join(ISOLATION_LEVELS)}")
    if p["stock"] < 0 or p["qty"] < 1:
        raise LabError("-p stock must be >= 0 and qty >= 1")


async def setup(env: Env) -> None:
    await env.db.execute(
        "CREATE TABLE inventory (product_id int PRIMARY KEY, stock int NOT NULL,"
        " version int NOT NULL)"
    )
    await env.db.execute(
        "CREATE TABLE orders (id serial PRIMARY KEY, product_id int NOT NULL,"
        " buyer text NOT NULL, qty int NOT NULL)"
    )
    await env.db.execute(
        "INSERT INTO inventory VALUES ($1, $2, $3)", PRODUCT, env.params["stock"], INITIAL_VERSION
    )
    _RUNS[env] = Rendezvous(env.db, env.n, POINTS)


# --- the four variants: same transaction, same rendezvous, one step changed ----------------


async def buggy(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    return await _buy(env, conn, actor, READ, _write_computed)


async def fixed(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    return await _buy(env, conn, actor, None, _write_guarded)  # no read: SQL does the math


async def fixed_for_update(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    return await _buy(env, conn, actor, READ_LOCKED, _write_computed)


async def fixed_optimistic(env: Env, conn: asyncpg.Connection | None, actor: int) -> str:
    return await _buy(env, conn, actor, READ, _write_versioned)


Write = Callable[[asyncpg.Connection, int, "asyncpg.Record | None"], Awaitable[str]]


async def _write_computed(conn: asyncpg.Connection, qty: int, row: asyncpg.Record | None) -> str:
    assert row is not None
    await conn.execute(WRITE_COMPUTED, row["stock"] - qty, PRODUCT)
    return "ok"


async def _write_guarded(conn: asyncpg.Connection, qty: int, row: asyncpg.Record | None) -> str:
    left = await conn.fetchval(WRITE_GUARDED, qty, PRODUCT)
    return "out_of_stock" if left is None else "ok"  # rowCount 0 → OUT_OF_STOCK


async def _write_versioned(conn: asyncpg.Connection, qty: int, row: asyncpg.Record | None) -> str:
    assert row is not None
    status = await conn.execute(WRITE_VERSIONED, row["stock"] - qty, PRODUCT, row["version"])
    return "ok" if status == "UPDATE 1" else "conflict"  # UPDATE 0 → HTTP 409


async def _buy(
    env: Env, conn: asyncpg.Connection | None, actor: int, read: str | None, write: Write
) -> str:
    assert conn is not None
    rv, qty, who = _RUNS[env], env.params["qty"], f"buyer-{actor + 1}"
    with rv.party(actor, conn.get_server_pid()):
        try:
            async with conn.transaction(isolation=env.params["isolation"]):
                row = await conn.fetchrow(read, PRODUCT) if read else None
                if row is not None:
                    env.trace(who, "read", stock=row["stock"], version=row["version"])
                await _meet(env, rv, actor, "read")
                if row is not None and row["stock"] < qty:
                    env.trace(who, "out of stock (read)")
                    return "out_of_stock"
                word = await write(conn, qty, row)
                env.trace(who, "wrote" if word == "ok" else f"wrote 0 rows: {word}")
                if word != "ok":
                    return word
                await conn.execute(ORDER, PRODUCT, who, qty)
                await _meet(env, rv, actor, "write")
            return "ok"
        finally:
            for point in sorted(rv.waited[actor]):
                env.add(f"blocked_before_{point}")


async def _meet(env: Env, rv: Rendezvous, actor: int, point: str) -> None:
    """Wait at `point` for the other buyers; trace each wait the server reports, once."""
    before = {p: set(w) for p, w in rv.waited.items()}
    for peer, by in (await rv.arrive(actor, point)).items():
        if rv.waited[peer] != before[peer]:
            holders = [f"buyer-{p + 1}" for p, pid in rv.pids.items() if pid in by]
            env.trace(f"buyer-{peer + 1}", "waits on a lock", held_by=holders)


async def invariant(env: Env) -> list[Check]:
    """Every unit sold left the stock, and no more units were sold than there were."""
    stock = await env.db.fetchval("SELECT stock FROM inventory WHERE product_id = $1", PRODUCT)
    sold = await env.db.fetchval("SELECT coalesce(sum(qty), 0) FROM orders")
    initial = env.params["stock"]
    return [
        Check("no oversell", sold <= initial, f"sold {sold}, initial stock {initial}"),
        Check(
            "sold == initial - final stock",
            sold == initial - stock,
            f"sold {sold}, stock {initial} -> {stock}",
        ),
        Check("stock never negative", stock >= 0, f"final stock {stock}"),
    ]


# --- claims ------------------------------------------------------------------------------


def _shape(
    variant: str, *, isolation: str, words: Mapping[str, int], counter: str | None = None
) -> Callable[[Mapping[str, Record]], tuple[bool, str] | None]:
    """Outcomes of `variant` at n=2, stock 1 are exactly `words`, and the server saw the
    second buyer blocked before `counter`'s point; judged only at that isolation level."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        rec = records[variant]
        p = rec["params"]
        at_rc = p["isolation"] == "read_committed"
        if at_rc != (isolation == "read_committed") or rec["knobs"]["n"] != 2 or p["stock"] != 1:
            return None  # the document's setup: two buyers, one unit, one each
        got = dict(rec["outcomes"])
        seen = rec["counters"].get(counter, 0) if counter else 0
        measured = f"{variant}: {got}" + (f", {counter}={seen}" if counter else "")
        return got == dict(words) and (counter is None or seen >= 1), measured

    return check


def _at(isolation: str, claim: Claim) -> Claim:
    """`claim`, judged only when the run's isolation is (or is not) READ COMMITTED."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        rc = all(records[v]["params"]["isolation"] == "read_committed" for v in claim.variants)
        return claim.check(records) if rc == (isolation == "read_committed") else None

    return Claim(claim.id, claim.text, claim.variants, check, claim.published)


RC, RR = "read_committed", "repeatable_read"
PUBLISHED = {
    "buggy": "Cả hai request đọc stock = 1, cả hai thấy đủ hàng, cả hai ghi stock = 0 và cả "
    "hai tạo order. Bạn vừa bán 2 chiếc khi chỉ có 1.",
    "fixed": "[ { status: 'fulfilled', value: 0 }, { status: 'rejected', reason: Error: "
    "OUT_OF_STOCK } ]",
    "fixed-for-update": "Transaction thứ hai gọi cùng accountId sẽ chờ ở câu SELECT ... FOR NO "
    "KEY UPDATE cho tới khi transaction đầu commit, rồi đọc số dư mới.",
    "fixed-optimistic": "Người thứ nhất lưu: UPDATE 1 (version 7 → 8); Người thứ hai lưu với "
    "version=7: UPDATE 0 → 409 Conflict",
}
LC8 = (
    "Ở REPEATABLE READ/SERIALIZABLE, thay vì đánh giá lại, transaction chờ bị lỗi could not "
    "serialize access due to concurrent update (40001)"
)
FIXES = ("fixed", "fixed-for-update", "fixed-optimistic")
CLAIMS = (
    Claim(
        "LC-4",
        "Read-compute-write inside BEGIN/COMMIT at READ COMMITTED: both buyers buy the last unit",
        ("buggy",),
        _shape("buggy", isolation=RC, words={"ok": 2}, counter="blocked_before_write"),
        PUBLISHED["buggy"],
    ),
    _at(RC, invariant_broken("LC-4", "buggy", "no oversell", "buggy: sold more than the stock")),
    Claim(
        "LC-5",
        "Guarded UPDATE: one buyer succeeds; the other waited on the row, re-evaluated WHERE, "
        "got rowcount 0",
        ("fixed",),
        _shape(
            "fixed",
            isolation=RC,
            words={"ok": 1, "out_of_stock": 1},
            counter="blocked_before_write",
        ),
        PUBLISHED["fixed"],
    ),
    Claim(
        "LC-6",
        "FOR NO KEY UPDATE: the second buyer waits in its read, then reads stock 0",
        ("fixed-for-update",),
        _shape(
            "fixed-for-update",
            isolation=RC,
            words={"ok": 1, "out_of_stock": 1},
            counter="blocked_before_read",
        ),
        PUBLISHED["fixed-for-update"],
    ),
    Claim(
        "LC-7",
        "Version column: the second save with the old version updates 0 rows (409)",
        ("fixed-optimistic",),
        _shape(
            "fixed-optimistic",
            isolation=RC,
            words={"ok": 1, "conflict": 1},
            counter="blocked_before_write",
        ),
        PUBLISHED["fixed-optimistic"],
    ),
    *(
        _at(RC, invariants_hold("LC-4", v, f"{v}: no oversell, every sale left the stock"))
        for v in FIXES
    ),
    Claim(
        "LC-8",
        "At REPEATABLE READ the guarded UPDATE's waiter fails with 40001 instead of re-checking",
        ("fixed",),
        _shape("fixed", isolation=RR, words={"ok": 1, "40001": 1}, counter="blocked_before_write"),
        LC8,
        cases=("repeatable-read",),
    ),
)

SCENARIO = Scenario(
    id="lost-update",
    validate=validate,
    doc=__doc__ or "",
    kind="actors",
    variants={
        "buggy": buggy,
        "fixed": fixed,
        "fixed-for-update": fixed_for_update,
        "fixed-optimistic": fixed_optimistic,
    },
    outcomes=("ok", "out_of_stock", "conflict", "40001"),
    claims=CLAIMS,
    published=PUBLISHED,
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=2, arrival="burst", actor_timeout_s=30, run_timeout_s=60),
    params={"stock": 1, "qty": 1, "isolation": RC},
    cases={"repeatable-read": {"isolation": RR}},  # LC-8
    param_help={
        "stock": "units of product 101 before the sale",
        "qty": "units each buyer takes",
        "isolation": "transaction isolation: " + ", ".join(ISOLATION_LEVELS),
    },
    sources=("LC",),
)
