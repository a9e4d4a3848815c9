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
See:        claim LC-14 in claims.py; expected/ has the schedules' transcripts. jobs 1..6
            with priority 10..60. s1, the writer, raises job 1's priority to 100 and deletes
            job 2 in one transaction. s2 reads the top 3 with the LIMIT on the locking
            SELECT itself (`top`); s3 with the LIMIT inside a subquery (`WHERE id IN
            (SELECT ... LIMIT 3)`, the fix's SKIP LOCKED inside it, as in the document's
            queue claim). On PostgreSQL 17 the `top` form re-reads past the dropped row and
            still returns 3, job 1 first; the `subquery` form, whose LIMIT runs before the
            lock, returns fewer. In that shape the fix differs in two ways, not one: the
            lock moves inside the LIMIT and skips held rows. SKIP LOCKED on the outer query
            alone would return 1 row: the subquery still picks jobs 1 and 2, and the outer
            lock skips both.
"""

from __future__ import annotations

from lab.core.scenario import Env
from lab.core.steps import Pinned, Session

LIMIT = 3
REORDER = "UPDATE jobs SET prio = 100 WHERE id = 1"  # first in priority order, now last
DELETE = "DELETE FROM jobs WHERE id = 2"  # picked by the LIMIT, then gone
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
FORMS = ("top", "subquery")  # s2's and s3's form
IN_ORDER = "ok"
OUT_OF_ORDER = "out_of_order"
SHORT = "short"
WROTE = "wrote"


async def schema(env: Env) -> None:
    await env.db.execute(
        "CREATE TABLE jobs (id int PRIMARY KEY, prio int NOT NULL, status text NOT NULL)"
    )


async def setup(env: Env) -> None:
    await env.db.execute("INSERT INTO jobs SELECT i, i * 10, 'new' FROM generate_series(1, 6) i")


async def _session(s: Session, reads: dict[str, str]) -> str:
    """Every third session writes; the others read, in the top and the subquery form."""
    if s.index % 3 == 0:
        async with s.transaction():
            await s.execute("reorder", REORDER)
            await s.execute("delete", DELETE)
        return WROTE
    rows = await s.fetch("read", reads[FORMS[s.index % 3 - 1]])  # its own implicit transaction
    prios = [r["prio"] for r in rows]
    return SHORT if len(rows) < LIMIT else IN_ORDER if prios == sorted(prios) else OUT_OF_ORDER


async def buggy(env: Env, s: Session) -> str:
    return await _session(s, READS["buggy"])


async def fixed(env: Env, s: Session) -> str:
    return await _session(s, READS["fixed"])


# --- pinned: s1 writes, s2 reads the top form, s3 the subquery form ----------------------

STEPS = {"s1": ("reorder", "delete", "commit"), "s2": ("read",), "s3": ("read",)}
PINNED = Pinned(
    code={"buggy": buggy, "fixed": fixed},
    steps={"buggy": STEPS, "fixed": STEPS},
    sessions=("s1", "s2", "s3"),
    schedules={
        # both reads start while s1 holds job 1 changed and job 2 deleted
        v: {"writer-first": ("s1 reorder", "s1 delete", "s2 read", "s3 read", "s1 commit")}
        for v in ("buggy", "fixed")
    },
)
