"""pool-transaction on a real server: statements through the pool are no transaction (LC-26)."""

from __future__ import annotations

from scenarios.pool_transaction import SCENARIO
from tests.conftest import RunFn, assert_all_held


async def test_statements_on_the_pool_are_no_transaction(run_scenario: RunFn) -> None:
    """pool.execute('BEGIN') .. ROLLBACK undoes nothing and a FOR UPDATE is not held; asyncpg
    says it rolled back a connection released in a transaction. withTx undoes and holds."""
    recs = await run_scenario(SCENARIO)
    ev = recs["buggy"]["evidence"]
    assert ev["balance_after_rollback"] == 900 and ev["row_locked"] is False
    assert any("Resetting connection with an active transaction" in n for n in ev["asyncpg"])
    fx = recs["fixed"]["evidence"]
    assert fx["balance_after_rollback"] == 1000 and fx["row_locked"] is True
    assert fx["asyncpg"] == []
    for rec in recs.values():
        assert_all_held(rec["claims"])
