"""id-sort-order on real servers: a string sort against ORDER BY id deadlocks; numeric does not."""

from __future__ import annotations

from scenarios.id_sort_order import SCENARIO, js_default_sort
from tests.conftest import RunFn, assert_all_held

# One app-path and one SQL-path transfer, 200 ms of other logic between the app path's two
# locks: the app path holds 10 long before the SQL path (which waits 100 ms) asks for it.
FORCED = {"step_pause_ms": 200.0}


def test_default_sort_compares_strings() -> None:
    """[10, 9] stays [10, 9] under a string comparison, as in JavaScript."""
    assert js_default_sort([10, 9]) == [10, 9]
    assert js_default_sort([9, 10]) == [10, 9]


async def test_mixed_orders_deadlock(run_scenario: RunFn) -> None:
    """Buggy: one 40P01 reported by the server, a cycle of two, balances still consistent."""
    rec = (await run_scenario(SCENARIO, ["buggy"], n=2, deadlock_timeout_ms=100, params=FORCED))[
        "buggy"
    ]
    assert rec["outcomes"] == {"ok": 1, "40P01": 1}
    assert rec["evidence"]["pg_stat_deadlocks"] == 1
    assert rec["evidence"]["deadlocks"]["cycle_lengths"] == {"2": 1}
    assert all(i["held"] for i in rec["invariants"])


async def test_numeric_order_everywhere(run_scenario: RunFn) -> None:
    """Fixed under the same interleaving: both commit, no deadlock, every claim holds."""
    records = await run_scenario(SCENARIO, n=2, deadlock_timeout_ms=100, params=FORCED)
    assert records["fixed"]["outcomes"] == {"ok": 2}
    assert records["fixed"]["evidence"]["pg_stat_deadlocks"] == 0
    assert_all_held([c for r in records.values() for c in r["claims"]])
