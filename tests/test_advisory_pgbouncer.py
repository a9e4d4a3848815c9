"""advisory-pgbouncer on a real PgBouncer (transaction mode) in front of real PostgreSQL."""

from __future__ import annotations

import pytest

from lab.servers import Servers
from scenarios.advisory_pgbouncer import SCENARIO, WARNING
from scenarios.checkout_deadlock import SCENARIO as CHECKOUT
from tests.conftest import RunFn, assert_all_held


@pytest.fixture(autouse=True)
def _need_pgbouncer(servers: Servers) -> None:
    if "transaction" not in servers.pgbouncer:
        pytest.skip("no PgBouncer on this machine (apt-get install pgbouncer)")


async def test_session_lock_leaks_through_transaction_mode(run_scenario: RunFn) -> None:
    """The unlock lands on another server connection: false + WARNING, inherited, leaked."""
    rec = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]
    ev = rec["evidence"]
    assert rec["outcomes"] == {"unlock_false": 1, "inherited_lock": 1}
    assert any(WARNING in w for w in ev["unlock_warnings"])
    assert ev["job_server_pid"] == ev["other_server_pid"]
    assert [lock["pid"] for lock in ev["advisory_locks_after_job"]] == [ev["job_server_pid"]]
    assert not rec["invariants"][0]["held"]
    assert_all_held(rec["claims"])


async def test_xact_lock_is_safe_behind_transaction_mode(run_scenario: RunFn) -> None:
    """pg_advisory_xact_lock: the other client sees it busy, COMMIT frees it, nothing leaks."""
    rec = (await run_scenario(SCENARIO, ["fixed"]))["fixed"]
    assert rec["outcomes"] == {"released": 1, "lock_busy": 1}
    assert rec["evidence"]["advisory_locks_after_job"] == []
    assert rec["evidence"]["unlock_warnings"] == []
    assert all(i["held"] for i in rec["invariants"])
    assert_all_held(rec["claims"])


async def test_actors_can_connect_through_pgbouncer(run_scenario: RunFn) -> None:
    """--connect pgbouncer-transaction: actors share PgBouncer's few server connections."""
    rec = (await run_scenario(CHECKOUT, ["fixed"], n=8, connect="pgbouncer-transaction"))["fixed"]
    assert rec["outcomes"] == {"ok": 8}
    assert rec["knobs"]["connect"] == "pgbouncer-transaction"
