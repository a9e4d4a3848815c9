"""advisory-keys on real servers: a real hashtext() collision, one-key vs two-key locks."""

from __future__ import annotations

from lab.servers import Servers
from scenarios.advisory_keys import COLLIDING, COLLIDING_HASH, NAMESPACE_JOBS, SCENARIO
from tests.conftest import RunFn, claims_of


async def test_the_pair_still_collides_on_this_server(servers: Servers) -> None:
    """The two names kept as constants differ and have the same hashtext() on the server."""
    import asyncpg

    assert servers.pg is not None
    conn = await asyncpg.connect(servers.pg.dsn)
    try:
        a, b = COLLIDING
        row = await conn.fetchrow("SELECT hashtext($1) AS a, hashtext($2) AS b", a, b)
    finally:
        await conn.close()
    assert a != b
    assert row is not None and row["a"] == row["b"] == COLLIDING_HASH


async def test_buggy_one_key_blocks_the_other_job(run_scenario: RunFn) -> None:
    """hashtext keys: B's try-lock is false and its lock waits, pg_blocking_pids naming A's holder."""
    rec = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]
    ev = rec["evidence"]
    assert rec["outcomes"] == {"ok": 1, "lock_busy": 1}
    assert ev["try_lock"] is False and ev["blocked_by"] == [ev["holder"]]
    assert ev["holder_advisory"] == [{"classid": 0, "objid": COLLIDING_HASH, "objsubid": 1}]


async def test_fixed_two_keys_keep_them_apart(run_scenario: RunFn) -> None:
    """(namespace, id) keys: B locks at once while A holds; the holder's lock is in the two-key space."""
    rec = (await run_scenario(SCENARIO, ["fixed"]))["fixed"]
    ev = rec["evidence"]
    assert rec["outcomes"] == {"ok": 2}
    assert ev["try_lock"] is True and ev["blocked_by"] is None
    assert ev["holder_advisory"] == [{"classid": NAMESPACE_JOBS, "objid": 1, "objsubid": 2}]


async def test_every_claim_holds(run_scenario: RunFn) -> None:
    """Both variants at the defaults: every claim holds."""
    records = await run_scenario(SCENARIO)
    for rec in records.values():
        assert all(v == [True] * len(v) for v in claims_of(rec).values()), rec["claims"]
    assert sum(len(r["claims"]) for r in records.values()) == len(SCENARIO.claims)
