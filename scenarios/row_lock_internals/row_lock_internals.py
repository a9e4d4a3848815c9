"""Row lock internals: row locks live in the row itself and are shared through MultiXacts.

Symptom:    a batch that reads 100,000 rows FOR UPDATE "to be safe" writes megabytes of WAL;
            every child INSERT under one hot parent mints a MultiXact.
Root cause: a row lock is written into the tuple header (xmax and infomask bits), not into
            the shared lock table: no pg_locks entry per row, no escalation, but locking a
            row writes its page (one WAL record per row). When a second transaction locks
            a row another still holds in a shared mode (the FK check's FOR KEY SHARE), xmax
            must name both: a new MultiXact each time a locker joins.
Fix:        (fixed) read without a locking clause what you will not write; spread children
            over parents (or keep the overlap short).
Published:  "Row lock được ghi ngay trong tuple header (trường xmax cùng các bit cờ), không nằm
            trong bảng lock bộ nhớ ... Cái giá: lock một row là ghi vào page (dirty page,
            WAL). Khi nhiều transaction cùng giữ lock chia sẻ, Postgres tạo một MultiXact."
            "MultiXact bùng nổ: nhiều transaction cùng FOR SHARE/FOR KEY SHARE một row cha
            nóng (mỗi insert con), tạo nhiều MultiXact." No numbers (PostgreSQL 17.11)
            — locking-concurrency-control.vi.txt, "Row-level lock", "Edge cases"
See:        claims LC-28, LC-29 in claims.py; row-lock-modes (the modes, LC-34). WAL is the
            statement's own, as EXPLAIN (ANALYZE, WAL) reports it (its records and bytes,
            not the cluster's LSN, which every backend and autovacuum moves); the probe of
            how many rows another session can still lock (SKIP LOCKED, which locks them
            itself) runs in a second, unmeasured pass. The MultiXact counter is mxid_age()
            of the parents' relminmxid read at the start: live, no CHECKPOINT needed.
            Overlap is forced by the server's report: each insert has returned and
            pg_stat_activity shows every inserter idle in transaction before any commits.
"""

from __future__ import annotations

import json
from typing import Any

from lab.core.scenario import Env

ROWS = 100_000  # the batch the document's "millions of rows" stands for
HOT_INSERTS = 20  # overlapping child inserts
MIN_WAL_PER_ROW = 40  # bytes: one heap-lock record per row (56 measured on 17.10)
MXID_AGE = "SELECT mxid_age($1::text::xid)"
EXPLAIN_WAL = "EXPLAIN (ANALYZE, WAL, TIMING OFF, FORMAT JSON) "  # runs it, reports its WAL


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL)")
    await env.db.execute(f"INSERT INTO items SELECT i, 1 FROM generate_series(1, {ROWS}) i")
    await env.db.execute("VACUUM (FREEZE) items")  # hint bits set: reads write nothing
    await env.db.execute("CREATE TABLE parents (id int PRIMARY KEY, name text NOT NULL)")
    await env.db.execute(
        "CREATE TABLE children (id serial PRIMARY KEY, parent_id int NOT NULL REFERENCES parents)"
    )
    await env.db.execute(
        f"INSERT INTO parents SELECT i, 'p' || i FROM generate_series(1, {HOT_INSERTS}) i"
    )


async def buggy(env: Env) -> None:
    env.extra_evidence["batch"] = await lock_batch(env, "FOR UPDATE")
    env.extra_evidence["children"] = await children(env, hot=True)


async def fixed(env: Env) -> None:
    env.extra_evidence["batch"] = await lock_batch(env, "")
    env.extra_evidence["children"] = await children(env, hot=False)


async def lock_batch(env: Env, clause: str) -> dict[str, Any]:
    """LC-28: one transaction reads every row of items with `clause`; twice, because the
    second look (SKIP LOCKED locks every free row) writes WAL of its own."""
    s = await env.connect()
    batch = f"SELECT count(*) FROM (SELECT id FROM items {clause}) b"
    try:
        await s.execute("BEGIN")
        plan = json.loads(await s.fetchval(EXPLAIN_WAL + batch))[0]["Plan"]  # step lock
        rows = plan["Plans"][0]["Actual Rows"]  # the subquery's rows, under the count
        locks = await env.db.fetch(  # step look: what pg_locks holds for it (writes nothing)
            "SELECT locktype, mode, relation::regclass::text AS rel FROM pg_locks WHERE pid = $1",
            s.get_server_pid(),
        )
        await s.execute("COMMIT")  # step commit
        await s.execute("BEGIN")  # again, and another session counts the rows it can lock
        await s.execute(batch)
        free = await env.db.fetchval(
            "SELECT count(*) FROM (SELECT id FROM items FOR UPDATE SKIP LOCKED) b"
        )
        await s.execute("COMMIT")
    finally:
        s.terminate()
    env.outcome("ok")
    return {
        "clause": clause,
        "rows": rows,
        "wal_bytes": int(plan["WAL Bytes"]),
        "wal_records": int(plan["WAL Records"]),
        "free_rows": free,
        "pg_locks": [dict(r) for r in locks],
    }


async def children(env: Env, *, hot: bool) -> dict[str, Any]:
    """LC-29: HOT_INSERTS transactions each insert a child (one parent, or one each) and
    stay open until all have inserted; the server shows them all open, then all commit."""
    ref = await env.db.fetchval(
        "SELECT relminmxid::text FROM pg_class WHERE oid = 'parents'::regclass"
    )
    conns = [await env.connect() for _ in range(HOT_INSERTS)]
    try:
        mx0 = await env.db.fetchval(MXID_AGE, ref)
        for i, c in enumerate(conns):  # step insert: nothing blocks (KEY SHARE does not conflict)
            await c.execute("BEGIN")
            await c.execute("INSERT INTO children (parent_id) VALUES ($1)", 1 if hot else i + 1)
        xids = [await c.fetchval("SELECT pg_current_xact_id()::text") for c in conns]
        open_ = await env.db.fetchval(  # step overlap: the server's view, every one still open
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int[])"
            " AND state = 'idle in transaction' AND backend_xid IS NOT NULL",
            [c.get_server_pid() for c in conns],
        )
        xmax = await env.db.fetchval("SELECT xmax::text FROM parents WHERE id = 1")
        members = []
        if xmax not in xids:  # xmax names no single inserter: a MultiXact
            members = await env.db.fetch(
                "SELECT xid::text, mode FROM pg_get_multixact_members("
                "(SELECT xmax FROM parents WHERE id = 1))"
            )
        for c in conns:  # step commit
            await c.execute("COMMIT")
        mx = await env.db.fetchval(MXID_AGE, ref) - mx0
    finally:
        for c in conns:
            c.terminate()
    env.outcome("ok")
    return {
        "hot": hot,
        "inserts": len(conns),
        "open_together": open_,
        "multixacts": mx,
        "xmax_members": [dict(m) for m in members],
        "inserters": xids,
    }
