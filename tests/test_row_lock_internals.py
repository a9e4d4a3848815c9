"""row-lock-internals on real servers: row locks in the tuple header, MultiXacts."""

from __future__ import annotations

from lab.servers import Servers
from scenarios.row_lock_internals import SCENARIO
from scenarios.row_lock_internals.row_lock_internals import HOT_INSERTS, MIN_WAL_PER_ROW, ROWS
from tests.conftest import RunFn, claims_of


def test_registered_with_the_documents_sentence() -> None:
    """The scenario is in the catalogue and quotes the tuple-header sentence."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    assert "tuple header" in SCENARIO.section("Published")
    assert {c.id for c in SCENARIO.claims} == {"LC-28", "LC-29"}


async def test_locking_rows_writes_wal_but_no_lock_table_entries(run_scenario: RunFn) -> None:
    """LC-28: FOR UPDATE over every row leaves a handful of pg_locks rows and writes WAL per row."""
    b = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]["evidence"]["batch"]
    assert b["rows"] == ROWS and b["free_rows"] == 0
    assert {lk["locktype"] for lk in b["pg_locks"]} == {"relation", "transactionid", "virtualxid"}
    assert len(b["pg_locks"]) <= 4
    assert b["wal_bytes"] >= ROWS * MIN_WAL_PER_ROW


async def test_hot_parent_mints_multixacts_listing_every_inserter(run_scenario: RunFn) -> None:
    """LC-29: overlapping inserts under one parent: xmax is a MultiXact of every inserter, KEY SHARE."""
    c = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]["evidence"]["children"]
    assert c["open_together"] == HOT_INSERTS
    assert c["multixacts"] == HOT_INSERTS - 1  # a new one each time a locker joins
    assert sorted(m["xid"] for m in c["xmax_members"]) == sorted(c["inserters"])
    assert {m["mode"] for m in c["xmax_members"]} == {"keysh"}


async def test_fixed_reads_write_nothing_and_spread_parents_mint_nothing(
    run_scenario: RunFn,
) -> None:
    """The plain read writes no WAL; the same inserts spread over parents mint no MultiXact."""
    ev = (await run_scenario(SCENARIO, ["fixed"]))["fixed"]["evidence"]
    assert ev["batch"]["wal_bytes"] < 1024 and ev["batch"]["free_rows"] == ROWS
    assert ev["children"]["multixacts"] == 0 and not ev["children"]["xmax_members"]


async def test_every_claim_holds(run_scenario: RunFn) -> None:
    """Both variants at the defaults: every claim holds."""
    records = await run_scenario(SCENARIO)
    for rec in records.values():
        assert all(v == [True] * len(v) for v in claims_of(rec).values()), rec["claims"]
    assert sum(len(r["claims"]) for r in records.values()) == len(SCENARIO.claims)


async def test_checkpoint_counter_agrees_with_mxid_age(
    run_scenario: RunFn, servers: Servers
) -> None:
    """The MultiXact counter the scenario reads (mxid_age) moves as pg_control_checkpoint()'s
    next_multixact_id does between two CHECKPOINTs around the run."""
    import asyncpg

    assert servers.pg is not None
    conn = await asyncpg.connect(servers.pg.dsn)
    next_mx = "SELECT next_multixact_id::text::bigint FROM pg_control_checkpoint()"
    try:
        await conn.execute("CHECKPOINT")
        before = await conn.fetchval(next_mx)
        c = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]["evidence"]["children"]
        await conn.execute("CHECKPOINT")
        after = await conn.fetchval(next_mx)
    finally:
        await conn.close()
    assert c["multixacts"] == HOT_INSERTS - 1
    assert after - before == c["multixacts"]
