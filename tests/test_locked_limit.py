"""locked-limit on a real server: a locking LIMIT read behind a concurrent change (LC-14)."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from lab.servers import Servers
from scenarios.locked_limit import CHANGES, PICK, SCENARIO
from tests.conftest import RunFn


def shapes(rec: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(s["read"], s["change"]): s for s in rec["evidence"]["shapes"]}


def test_registered_with_the_published_text() -> None:
    """In the catalogue, quoting the document's gotcha."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    published = " ".join(SCENARIO.section("Published").split())
    assert "kết quả có thể ít hơn LIMIT hoặc không đúng thứ tự" in published
    assert {c.id for c in SCENARIO.claims} == {"LC-14"}


async def test_locking_limit_reads_behind_a_writer(run_scenario: RunFn) -> None:
    """Every buggy read waited for the writer (the server showed it): the top form returns
    job 1 first with its new priority 100, re-reads past a deleted job, and the LIMIT
    inside a subquery returns 2 rows. SKIP LOCKED, in the same places, returns 2, 3, 4
    at once in every shape."""
    records = await run_scenario(SCENARIO)
    buggy, fixed = shapes(records["buggy"]), shapes(records["fixed"])
    assert buggy[("top", "reorder")]["rows"] == [[1, 100], [2, 20], [3, 30]]
    assert buggy[("top", "delete")]["rows"] == [[2, 20], [3, 30], [4, 40]]
    assert buggy[("subquery", "delete")]["rows"] == [[2, 20], [3, 30]]
    assert all(s["waited"] for s in buggy.values())
    assert records["buggy"]["outcomes"] == {"ok": 1, "out_of_order": 1, "short": 1}
    for s in fixed.values():
        assert s["rows"] == [[2, 20], [3, 30], [4, 40]] and not s["waited"]
    assert set(fixed) == set(buggy)  # the same shapes; only the reads differ
    assert records["fixed"]["outcomes"] == {"ok": 3}
    verdicts = [c for r in records.values() for c in r["claims"]]
    assert len(verdicts) == len(SCENARIO.claims) and all(c["held"] for c in verdicts), verdicts


async def test_skip_locked_outside_the_limit_still_comes_back_short(servers: Servers) -> None:
    """Why the fix also moves the lock in the subquery shape (docstring): SKIP LOCKED on the
    outer query alone skips job 1, which the subquery's LIMIT has already picked: 2 rows."""
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
            await writer.execute(CHANGES["delete"])
            rows = await reader.fetch(
                f"SELECT id, prio FROM jobs WHERE id IN ({PICK}) ORDER BY prio "
                "FOR UPDATE SKIP LOCKED"
            )
            assert [r["id"] for r in rows] == [2, 3]
        finally:
            await writer.close()
            await reader.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
