"""run_plan makes the next variant's database while one runs, and leaves none behind."""

from __future__ import annotations

import asyncpg

from lab.load.databases import database_name, drop_spares
from lab.load.plan import RunPlan
from lab.load.runner import run_plan
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


async def _left(servers: Servers, prefix: str) -> list[str]:
    assert servers.pg is not None
    conn = await asyncpg.connect(servers.pg.dsn)
    try:
        rows = await conn.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE $1", prefix + "%"
        )
    finally:
        await conn.close()
    return sorted(r["datname"] for r in rows)


async def test_spare_database_goes_to_the_next_plan(servers: Servers) -> None:
    """A plan with spare_after leaves one empty database; the next plan's first variant
    takes it (renamed), and afterwards nothing of either plan is left."""
    variants = list(SCENARIO.variants)[:2]
    knobs, params = knobs_for(SCENARIO, n=4), dict(SCENARIO.params)
    first = RunPlan(SCENARIO, variants, knobs, params, "sparetest1", write=False, spare_after=True)
    await run_plan(first, servers)
    assert await _left(servers, "locklab_sparetest") == [
        database_name("sparetest1", SCENARIO.id, "spare")
    ]
    second = RunPlan(SCENARIO, variants, knobs, params, "sparetest2", write=False)
    records = await run_plan(second, servers)
    assert [r["variant"] for r in records] == variants
    assert all(r["outcomes"] for r in records)
    assert await _left(servers, "locklab_sparetest") == []


async def test_drop_spares_drops_an_unused_spare(servers: Servers) -> None:
    """The spare made for a plan that does not come is dropped by drop_spares."""
    plan = RunPlan(
        SCENARIO, list(SCENARIO.variants)[:1], knobs_for(SCENARIO, n=4), dict(SCENARIO.params),
        "sparetest3", write=False, spare_after=True,
    )  # fmt: skip
    await run_plan(plan, servers)
    assert len(await _left(servers, "locklab_sparetest3")) == 1
    await drop_spares(servers)
    assert await _left(servers, "locklab_sparetest3") == []
