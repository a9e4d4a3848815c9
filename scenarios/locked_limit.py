"""Locked LIMIT: ORDER BY ... LIMIT ... FOR UPDATE behind a concurrent change.

Symptom:    a page of "the 3 most urgent jobs", read with FOR UPDATE, comes back out of
            order (a job whose priority just dropped is still first), or with fewer rows
            than the LIMIT although enough rows match.
Root cause: "sắp xếp xảy ra trước khi khoá và row có thể bị bỏ qua sau khi đánh giá lại":
            the rows are sorted and picked first, then locked; a row another transaction
            changed is re-read after that transaction commits, keeps its old place in the
            order, or is dropped when it no longer qualifies.
Fix:        for a queue, `FOR UPDATE SKIP LOCKED` (fixed): a row someone holds is skipped,
            not waited for, so the batch is full and in order ("chấp nhận được với queue").
            Exact pagination must not rely on a locking read at all.
Published:  FOR UPDATE với LIMIT và ORDER BY: khi row bị update đồng thời, kết quả có thể ít
            hơn LIMIT hoặc không đúng thứ tự, vì sắp xếp xảy ra trước khi khoá và row có thể
            bị bỏ qua sau khi đánh giá lại. Chấp nhận được với queue, không với phân trang
            chính xác. — locking-concurrency-control.vi.txt, "Gotchas"
See:        claim LC-14. jobs 1..6 with priority 10..60; in each shape a writer changes
            job 1 and holds it, the reader runs its statement, the lab waits until the
            server shows the reader blocked by the writer (SKIP LOCKED never blocks), then
            the writer commits. Shapes: the LIMIT on the locking SELECT itself (`top`) after
            job 1's priority became 100 (`reorder`) and after job 1 was deleted (`delete`);
            the LIMIT inside a subquery (`subquery`, `WHERE id IN (SELECT ... LIMIT 3)`, the
            fix's SKIP LOCKED inside it, as in the document's queue claim) after `delete`.
            On PostgreSQL 17 the `top` form re-reads past a dropped row and still returns 3;
            the `subquery` form, whose LIMIT runs before the lock, returns fewer. In that
            shape the fix differs in two ways, not one: the lock moves inside the LIMIT and
            skips held rows. SKIP LOCKED on the outer query alone would return 2 rows: the
            subquery still picks job 1, and the outer lock skips it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import asyncpg

from lab.claims import Claim, Record
from lab.errors import ScenarioFailure
from lab.interleave import task_or_blocked
from lab.scenario import Defaults, Env, Scenario

LIMIT = 3
CHANGED = 1  # the job the writer changes: first in priority order before the change
CHANGES = {
    "reorder": f"UPDATE jobs SET prio = 100 WHERE id = {CHANGED}",
    "delete": f"DELETE FROM jobs WHERE id = {CHANGED}",
}
PICK = f"SELECT id FROM jobs WHERE status = 'new' ORDER BY prio LIMIT {LIMIT}"
TOP = f"SELECT id, prio FROM jobs WHERE status = 'new' ORDER BY prio LIMIT {LIMIT}"
# variant -> form -> the reader's statement; the fix is SKIP LOCKED in the same place
READS = {
    "buggy": {
        "top": f"{TOP} FOR UPDATE",
        "subquery": f"SELECT id, prio FROM jobs WHERE id IN ({PICK}) ORDER BY prio FOR UPDATE",
    },
    "fixed": {
        "top": f"{TOP} FOR UPDATE SKIP LOCKED",
        "subquery": (
            f"SELECT id, prio FROM jobs WHERE id IN ({PICK} FOR UPDATE SKIP LOCKED) ORDER BY prio"
        ),  # the document's queue claim: the CTE/subquery locks, skipping held rows
    },
}
SHAPES = [("top", "reorder"), ("top", "delete"), ("subquery", "delete")]  # (form, change)
IN_ORDER, OUT_OF_ORDER, SHORT = "ok", "out_of_order", "short"


async def setup(env: Env) -> None:
    await env.db.execute(
        "CREATE TABLE jobs (id int PRIMARY KEY, prio int NOT NULL, status text NOT NULL)"
    )


async def buggy(env: Env) -> None:
    await _run(env, "buggy")


async def fixed(env: Env) -> None:
    await _run(env, "fixed")


async def _run(env: Env, variant: str) -> None:
    shapes = []
    for form, change in SHAPES:
        shape = await _shape(env, READS[variant][form], form, change)
        env.outcome(shape["outcome"])
        shapes.append(shape)
    env.extra_evidence["shapes"] = shapes


async def _shape(env: Env, sql: str, read: str, change: str) -> dict[str, Any]:
    """Fresh jobs; the writer changes job 1 and holds it while the reader reads."""
    await env.db.execute("TRUNCATE jobs")
    await env.db.execute("INSERT INTO jobs SELECT i, i * 10, 'new' FROM generate_series(1, 6) i")
    writer, reader = await env.connect(), await env.connect()
    task: asyncio.Task[list[asyncpg.Record]] | None = None
    try:
        await writer.execute("BEGIN")
        await writer.execute(CHANGES[change])
        env.trace("writer", change, sql=CHANGES[change])
        await reader.execute("BEGIN")
        task = asyncio.create_task(reader.fetch(sql))
        blockers = await task_or_blocked(env.db, reader.get_server_pid(), task, what=read)
        waited = blockers is not None
        if waited and blockers != [writer.get_server_pid()]:
            raise ScenarioFailure(f"{env.scenario} / {env.variant}: {read} blocked by {blockers}")
        env.trace("reader", "blocked by the writer" if waited else "answered without waiting")
        await writer.execute("COMMIT")
        rows = [[int(r["id"]), int(r["prio"])] for r in await task]  # as JSON keeps them
        await reader.execute("ROLLBACK")
    finally:
        if task is not None and not task.done():
            task.cancel()
        writer.terminate()
        reader.terminate()
    prios = [p for _, p in rows]
    outcome = SHORT if len(rows) < LIMIT else IN_ORDER if prios == sorted(prios) else OUT_OF_ORDER
    env.trace("reader", outcome, read=read, change=change, rows=rows)
    return {
        "read": read, "sql": sql, "change": change, "rows": rows, "waited": waited,
        "outcome": outcome,
    }  # fmt: skip


# --- claims -------------------------------------------------------------------------------


def _shapes(rec: Record) -> dict[tuple[str, str], dict[str, Any]]:
    return {(s["read"], s["change"]): s for s in rec["evidence"].get("shapes", [])}


def _seen(s: Mapping[str, Any]) -> str:
    rows = ", ".join(f"{i}:{p}" for i, p in s["rows"])
    return f"{s['read']} after {s['change']}: [{rows}] (id:prio)"


def _out_of_order(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    s = _shapes(records["buggy"]).get(("top", "reorder"))
    if s is None:
        return None
    return s["waited"] and s["outcome"] == OUT_OF_ORDER, f"buggy: {_seen(s)}"


def _fewer(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    shapes = [s for s in _shapes(records["buggy"]).values() if s["change"] == "delete"]
    if not shapes:
        return None
    held = any(s["waited"] and s["outcome"] == SHORT for s in shapes)
    return held, "buggy: " + "; ".join(f"{_seen(s)}, {len(s['rows'])} rows" for s in shapes)


def _queue_batch(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    shapes = list(_shapes(records["fixed"]).values())
    if not shapes:
        return None
    held = all(not s["waited"] and s["outcome"] == IN_ORDER for s in shapes)
    return held, "fixed: " + "; ".join(_seen(s) for s in shapes) + ", none waited"


CLAIMS = (
    Claim(
        "LC-14",
        "buggy: ORDER BY ... LIMIT ... FOR UPDATE behind a concurrent update returns the rows "
        "in the order they had before it",
        ("buggy",),
        _out_of_order,
        published="kết quả có thể ... không đúng thứ tự, vì sắp xếp xảy ra trước khi khoá",
    ),
    Claim(
        "LC-14",
        "buggy: a locking read can return fewer rows than its LIMIT when a picked row is "
        "dropped on re-evaluation",
        ("buggy",),
        _fewer,
        published="kết quả có thể ít hơn LIMIT ... row có thể bị bỏ qua sau khi đánh giá lại",
    ),
    Claim(
        "LC-14",
        "fixed: FOR UPDATE SKIP LOCKED (a queue's claim; in the subquery shape the lock moves "
        "inside the LIMIT, as in the document's claim query) returns a full batch, in order, "
        "without waiting",
        ("fixed",),
        _queue_batch,
        published="Chấp nhận được với queue",
    ),
)

SCENARIO = Scenario(
    id="locked-limit",
    doc=__doc__ or "",
    kind="script",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=(IN_ORDER, OUT_OF_ORDER, SHORT),
    claims=CLAIMS,
    published={
        "buggy": "FOR UPDATE với LIMIT và ORDER BY: kết quả có thể ít hơn LIMIT hoặc không đúng "
        "thứ tự",
        "fixed": "FOR UPDATE SKIP LOCKED: chấp nhận được với queue",
    },
    setup=setup,
    defaults=Defaults(n=1, run_timeout_s=60),
    sources=("LC",),
    script_connections=lambda n: 2,  # the writer and the reader
)
