"""run_plan makes the next variant's database while one runs, and leaves none behind."""

from __future__ import annotations

import asyncpg

from lab.runner import RunPlan, database_name, run_plan
from lab.servers import Servers
from scenarios.lost_update import SCENARIO
from tests.conftest import knobs_for


def test_database_names_stay_distinct_when_cut() -> None:
    """Two variants of a long run id get two names of at most 63 characters."""
    rid = "20261201-081907-1ce6/case-ttl-above-pause"
    a, b = (database_name(rid, "lease-gc-pause", v) for v in ("fixed", "buggy"))
    assert a != b and len(a) <= 63 and len(b) <= 63
    assert database_name("r1", "lost-update", "fixed") == "locklab_r1_lost_update_fixed"


async def test_every_database_is_dropped(servers: Servers) -> None:
    """Three variants, databases made ahead: none of the run's databases is left."""
    assert servers.pg is not None
    plan = RunPlan(
        SCENARIO, list(SCENARIO.variants)[:3], knobs_for(SCENARIO, n=4), dict(SCENARIO.params),
        "aheadtest", write=False,
    )  # fmt: skip
    records = await run_plan(plan, servers)
    assert [r["variant"] for r in records] == list(SCENARIO.variants)[:3]
    conn = await asyncpg.connect(servers.pg.dsn)
    try:
        left = await conn.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE 'locklab_aheadtest%'"
        )
    finally:
        await conn.close()
    assert left == []
