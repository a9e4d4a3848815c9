"""Upsert and idempotency keys: a double-submitted checkout must charge once and answer well.

Symptom:    a client double-submits checkout `chk_7f3a`; one request fails with 23505
            duplicate key (a 500 for the user), and a page-view counter loses a view to it.
Root cause: "insert if absent" as SELECT, then INSERT (buggy): neither sees the other's
            uncommitted row, both insert, the unique index fails the second. MERGE
            (buggy-merge) has no arbiter index: its NOT MATCHED branch still inserts, 23505.
Fix:        INSERT ... ON CONFLICT (key) DO NOTHING RETURNING key (fixed): a row means "mine";
            no row: SELECT it, done → replay the stored response, in_progress → 409, another
            request hash → 422. The counter: ON CONFLICT DO UPDATE ... RETURNING views.
Published:  "Lần gọi đầu: key = chk_7f3a (1 row: ta sở hữu request này)"; "Client retry: (0 rows)
            -- DO NOTHING không trả row cũ!"; "views 42"; "MERGE với insert đồng thời vẫn có thể
            lỗi unique violation"; "thêm RETURNING ở PG 17". No timings (PostgreSQL 17.11,
            Node 24 + node-postgres) — locking-concurrency-control.vi.txt, "Upsert ...",
            "So sánh với SQL Server".
See:        claims.py, LC-18..LC-21 (it probes the retry, a reused key, the gotchas).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import asyncpg

from lab.core.scenario import Env, executes
from lab.core.sqlfile import statements
from lab.core.steps import Pinned, Session, show_sql

KEY = "chk_7f3a"
BODY = {"cart": "c-1", "amount": 4990}
PRODUCT = 101
DAY = dt.date(2026, 12, 1)  # the document counts CURRENT_DATE; fixed, a transcript stays the same
NEEDS_17 = "needs_pg17"  # buggy-merge on an older server: MERGE ... RETURNING is PostgreSQL 17's

SQL = statements(__file__)  # upsert_idempotency.sql: the page-view counter, the long ones
FIND_KEY = "SELECT key FROM idempotency_keys WHERE key = $1"
INSERT_KEY = "INSERT INTO idempotency_keys (key, request_hash) VALUES ($1, $2)"
UPSERT_KEY = INSERT_KEY + " ON CONFLICT (key) DO NOTHING RETURNING key"
STORED = "SELECT status, request_hash, response FROM idempotency_keys WHERE key = $1"
CHARGE = "INSERT INTO charges (idem_key, amount) VALUES ($1, $2) RETURNING id"
FINISH = "UPDATE idempotency_keys SET status = 'done', response = $2 WHERE key = $1"


schema = executes(SQL["schema"])


# --- the three ways to "insert if absent": the key, then the page-view counter ------------
async def claim_select_insert(env: Env, s: Session, h: str) -> Any:
    async def select_then_insert() -> str | None:  # one step: the gap is the other's open tx
        if await s.conn.fetchval(FIND_KEY, KEY) is not None:
            return None  # someone has it
        env.add("saw_absent")
        return f"(no row); {await s.conn.execute(INSERT_KEY, KEY, h)}"

    shown = f"{show_sql(FIND_KEY, [KEY])}; if no row: {show_sql(INSERT_KEY, [KEY, h])}"
    return await s.step("claim", select_then_insert, shown=shown, result=lambda r: r or "found")


async def view_select_insert(s: Session) -> int:
    async def select_then_write() -> int:
        if await s.conn.fetchval(SQL["find_views"], PRODUCT, DAY) is None:
            return int(await s.conn.execute(SQL["insert_view"], PRODUCT, DAY) == "INSERT 0 1")
        return int(await s.conn.fetchval(SQL["bump_views"], PRODUCT, DAY))

    find, insert, bump = (
        show_sql(q, [PRODUCT, DAY])
        for q in (SQL["find_views"], SQL["insert_view"], SQL["bump_views"])
    )
    shown = f"{find}; if no row: {insert}, else {bump}"
    return int(await s.step("view", select_then_write, shown=shown, result=lambda v: f"views={v}"))


Claim = Callable[[Env, Session, str], Awaitable[Any]]  # something (the key) if the key is mine
View = Callable[[Session], Awaitable[int]]  # the views after this one
UPSERTS: dict[str, tuple[Claim, View]] = {
    "buggy": (claim_select_insert, view_select_insert),
    "buggy-merge": (
        lambda env, s, h: s.fetchval("claim", SQL["merge_key"], KEY, h),
        lambda s: s.fetchval("view", SQL["merge_view"], PRODUCT, DAY),
    ),
    "fixed": (  # DO NOTHING returns no row for the existing key (LC-19)
        lambda env, s, h: s.fetchval("claim", UPSERT_KEY, KEY, h),
        lambda s: s.fetchval("view", SQL["upsert_view"], PRODUCT, DAY),
    ),
}


# Code mutants (Scenario.mutants), read only as LC-19's counterfactuals: fixed with the
# statement one gotcha comes from changed, so that the probes after the run show it gone.
ROW_BACK = "mutant-do-nothing-dropped"  # the key claimed with DO UPDATE ... RETURNING
NO_CONFLICT = "mutant-on-conflict-dropped"  # the counter: buggy's, behind a lock
GROUPED = "mutant-repeated-key-dropped"  # fixed; the probes' batch one row a key (probes.py)
CLAIM_BACK = INSERT_KEY + " ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key RETURNING key"


async def view_locked(s: Session) -> int:
    """buggy's SELECT-then-write counter behind a per-product advisory lock: no INSERT is
    tried for a row that exists, so no id is drawn for a conflict."""
    await s.execute("view-lock", "SELECT pg_advisory_xact_lock($1)", PRODUCT)
    return await view_select_insert(s)


MUTANTS: dict[str, tuple[Claim, View]] = {
    ROW_BACK: (lambda env, s, h: s.fetchval("claim", CLAIM_BACK, KEY, h), UPSERTS["fixed"][1]),
    NO_CONFLICT: (UPSERTS["fixed"][0], view_locked),
    GROUPED: UPSERTS["fixed"],
}


def upserts(name: str) -> tuple[Claim, View]:
    """A variant's claim and counter, or a mutant's."""
    return UPSERTS[name] if name in UPSERTS else MUTANTS[name]


async def checkout(env: Env, s: Session, claim: Claim, body: Mapping[str, Any]) -> str:
    """The checkout endpoint behind an idempotency key; its answer (a 23505 is the 500)."""
    h = "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    try:
        async with s.transaction():  # the claim commits before the work: others see in_progress
            mine = await claim(env, s, h) is not None
    except asyncpg.UniqueViolationError:
        return "23505"
    if not mine:
        env.add("claim_no_row")
        row = await s.fetchrow("answer", STORED, KEY)
        assert row is not None
        if row["request_hash"] != h:
            return "key_reused"  # HTTP 422
        if row["status"] != "done":
            return "in_progress"  # HTTP 409, try again later
        env.extra_evidence["replayed"] = json.loads(row["response"])
        return "replayed"

    async def charge() -> str:
        charge_id = await s.conn.fetchval(CHARGE, KEY, body["amount"])
        response = {"charge_id": charge_id, "amount": body["amount"], "status": "paid"}
        env.extra_evidence["response"] = response
        return str(await s.conn.execute(FINISH, KEY, json.dumps(response)))

    stored = FINISH.replace("$2", "<the charge>").replace("$1", f"'{KEY}'")
    await s.step("answer", charge, shown=f"{show_sql(CHARGE, (KEY, body['amount']))}; {stored}")
    return "ok"


def variant(name: str) -> Callable[[Env, Session], Awaitable[str]]:
    async def request(env: Env, s: Session) -> str:
        """A double submit's request, then one page view of product 101 (its own transaction)."""
        if name == "buggy-merge" and s.conn.get_server_version().major < 17:
            return NEEDS_17  # MERGE ... RETURNING is 17's: not run, never a syntax error counted
        claim, view = upserts(name)
        word = await checkout(env, s, claim, BODY)
        env.add("views_sent")
        try:
            async with s.transaction(commit="view-commit"):
                env.sample("views_returned", await view(s))
            env.add("views_ok")
        except asyncpg.UniqueViolationError:
            env.add("views_23505")
        return word

    request.__name__ = name.replace("-", "_")
    return request


S = ("claim", "commit", "answer", "view", "view-commit")  # two requests: same key and body
# s2 claims while s1's claim is uncommitted, answers while s1 works, counts while s1 counts
CLAIMS = ("s1 claim", "s2 claim", "s1 commit", "s2 commit", "s2 answer", "s1 answer")
BOTH = (*CLAIMS, "s1 view", "s2 view", "s1 view-commit", "s2 view-commit")
CODE = {v: variant(v) for v in UPSERTS}  # the variants differ only in UPSERTS, the fix
STEPS = {v: {"s1": S, "s2": S} for v in CODE}
PINNED = Pinned(CODE, STEPS, schedules={v: {"double-submit": BOTH} for v in CODE})
