"""locked-limit on a real server: a locking LIMIT read behind a concurrent change (LC-14).

The reads must start while the writer holds its changes: the sequencer grants them in
that order and the server reports them blocked. The golden transcripts in
scenarios/locked_limit/expected/ are diffed by tests/test_pinned.py.
"""

from __future__ import annotations

import uuid

import asyncpg

from lab.core.profiles import QUICK
from lab.pinned import trace
from lab.servers import Servers
from lab.verify import verify_explore
from scenarios.locked_limit import SCENARIO
from scenarios.locked_limit.locked_limit import DELETE, PICK, REORDER


def test_registered_with_the_published_text() -> None:
    """In the catalogue, quoting the document's gotcha."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    published = " ".join(SCENARIO.section("Published").split())
    assert "kết quả có thể ít hơn LIMIT hoặc không đúng thứ tự" in published
    assert {c.id for c in SCENARIO.claims} == {"LC-14"}


async def test_locking_limit_reads_behind_a_writer(servers: Servers) -> None:
    """Both buggy reads wait for the writer (the server shows it): the top form returns job 1
    first with its new priority 100 and re-reads past the deleted job 2 (3 rows); the LIMIT
    inside a subquery returns 2 rows. SKIP LOCKED, in the same places, returns 3, 4, 5 at once."""
    assert SCENARIO.pinned is not None
    steps = SCENARIO.pinned.schedules["buggy"]["writer-first"]
    results = await trace(
        SCENARIO, servers, [(v, "writer-first", steps) for v in ("buggy", "fixed")],
        ["read_committed"], run_id="test", deadlock_ms=1000,
    )  # fmt: skip
    buggy, fixed = results
    assert buggy.waited == ["s2 read", "s3 read"] and fixed.waited == []
    assert buggy.outcomes == {"s1": "wrote", "s2": "out_of_order", "s3": "short"}
    assert fixed.outcomes == {"s1": "wrote", "s2": "ok", "s3": "ok"}
    assert "3 rows; id=1 prio=100; id=3 prio=30; id=4 prio=40" in buggy.transcript
    assert "2 rows; id=1 prio=100; id=3 prio=30" in buggy.transcript
    assert fixed.transcript.count("3 rows; id=3 prio=30; id=4 prio=40; id=5 prio=50") == 2


async def test_explore_claims_hold(servers: Servers) -> None:
    """LC-14 on the canonical schedule and every interleaving: all held."""
    result = await verify_explore(SCENARIO, QUICK, servers, run_id="test", write=False)
    assert result is not None and result.error is None, result and result.error
    assert len(result.verdicts) == len(SCENARIO.claims)
    assert all(v["status"] == "held" for v in result.verdicts), [
        (v["text"], v["measured"]) for v in result.verdicts if v["status"] != "held"
    ]


async def test_skip_locked_outside_the_limit_still_comes_back_short(servers: Servers) -> None:
    """Why the fix also moves the lock in the subquery shape (docstring): SKIP LOCKED on the
    outer query alone skips jobs 1 and 2, which the subquery's LIMIT has already picked."""
    assert servers.pg is not None
    admin = await asyncpg.connect(servers.pg.dsn)
    name = f"locklab_ll_{uuid.uuid4().hex[:8]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        writer = await asyncpg.connect(servers.pg.dsn, database=name)
        reader = await asyncpg.connect(servers.pg.dsn, database=name)
        try:
            await writer.execute(
                "CREATE TABLE jobs (id int PRIMARY KEY, prio int NOT NULL, status text NOT NULL);"
                "INSERT INTO jobs SELECT i, i * 10, 'new' FROM generate_series(1, 6) i"
            )
            await writer.execute("BEGIN")
            await writer.execute(REORDER)
            await writer.execute(DELETE)
            rows = await reader.fetch(
                f"SELECT id, prio FROM jobs WHERE id IN ({PICK}) ORDER BY prio "
                "FOR UPDATE SKIP LOCKED"
            )
            assert [r["id"] for r in rows] == [3]
        finally:
            await writer.close()
            await reader.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
