"""advisory-keys on real servers: a real hashtext() collision, one-key vs two-key locks.

Judged pinned: job B try-locks and then asks for its own key while job A holds A's; the
transcript shows A's pg_locks row, B's try-lock and whether the server showed B blocked.
"""

from __future__ import annotations

import pytest

from lab.core.profiles import QUICK
from lab.errors import LabError
from lab.pinned import PinnedResult, trace
from lab.servers import Servers
from lab.verify import verify_explore
from scenarios.advisory_keys import SCENARIO
from scenarios.advisory_keys.advisory_keys import COLLIDING, COLLIDING_HASH, NAMESPACE_JOBS
from scenarios.advisory_keys.claims import ORDER, a_holds
from tests.conftest import RunFn, assert_all_held


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


async def _order(servers: Servers, variant: str) -> PinnedResult:
    assert SCENARIO.pinned is not None
    steps = SCENARIO.pinned.schedules[variant][ORDER]
    [res] = await trace(
        SCENARIO, servers, [(variant, ORDER, steps)], ["read_committed"], run_id="test",
        deadlock_ms=1000,
    )  # fmt: skip
    return res


async def test_buggy_one_key_blocks_the_other_job(servers: Servers) -> None:
    """hashtext keys: B's try-lock is false and the server shows its lock waiting on A's."""
    res = await _order(servers, "buggy")
    assert res.outcomes == {"s1": "ok", "s2": "lock_busy"}
    assert res.waited == ["s2 lock"]
    assert a_holds(res.to_json()) == (0, COLLIDING_HASH, 1)
    assert "pg_try_advisory_xact_lock=False" in res.transcript


async def test_fixed_two_keys_keep_them_apart(servers: Servers) -> None:
    """(namespace, id) keys: B locks at once while A holds; A's lock is in the two-key space."""
    res = await _order(servers, "fixed")
    assert res.outcomes == {"s1": "ok", "s2": "ok"} and res.waited == []
    assert a_holds(res.to_json()) == (NAMESPACE_JOBS, 1, 2)
    assert res.kept


async def test_explore_claims_hold(servers: Servers) -> None:
    """Every claim of LC-33 holds on the canonical order and on every interleaving."""
    result = await verify_explore(SCENARIO, QUICK, servers, run_id="test", write=False)
    assert result is not None and result.error is None, result and result.error
    assert len(result.verdicts) == len(SCENARIO.claims)
    assert_all_held(result.verdicts)


async def test_a_load_of_the_fix_never_refuses(run_scenario: RunFn) -> None:
    """The two jobs as a load, in whatever order they meet: the two-key locks never clash."""
    rec = (await run_scenario(SCENARIO, ["fixed"]))["fixed"]
    assert rec["outcomes"] == {"ok": 2}
    assert all(i["held"] for i in rec["invariants"])


async def test_three_jobs_is_one_clear_error(run_scenario: RunFn) -> None:
    """The scenario has two jobs: -n 3 is a LabError saying so."""
    with pytest.raises(LabError, match="-n 2"):
        await run_scenario(SCENARIO, ["buggy"], n=3)
