"""id-sort-order on real servers: a string sort against ORDER BY id deadlocks; numeric does not.

The interleaving that matters (the app path holds its first row before the SQL path asks
for both) is a schedule the sequencer grants on what the server reports, no head start.
"""

from __future__ import annotations

from lab.core.profiles import QUICK
from lab.servers import Servers
from lab.verify import verify_explore
from scenarios.id_sort_order import SCENARIO, js_default_sort
from tests.conftest import RunFn


def test_default_sort_compares_strings() -> None:
    """[10, 9] stays [10, 9] under a string comparison, as in JavaScript."""
    assert js_default_sort([10, 9]) == [10, 9]
    assert js_default_sort([9, 10]) == [10, 9]


async def test_explore_claims_hold(servers: Servers) -> None:
    """Every interleaving of one app-path and one SQL-path transfer: the string sort
    deadlocks in some, numeric order in none; app-first ends ok / 40P01."""
    result = await verify_explore(SCENARIO, QUICK, servers, run_id="test", write=False)
    assert result is not None and result.error is None, result and result.error
    assert len(result.verdicts) == 3
    assert all(v["status"] == "held" for v in result.verdicts), [
        (v["text"], v["measured"]) for v in result.verdicts if v["status"] != "held"
    ]


async def test_numeric_order_everywhere_under_load(run_scenario: RunFn) -> None:
    """20 transfers at burst: numeric order commits every one; balances stay consistent."""
    records = await run_scenario(SCENARIO, deadlock_timeout_ms=100)
    assert records["fixed"]["outcomes"] == {"ok": 20}
    assert records["fixed"]["evidence"]["pg_stat_deadlocks"] == 0
    for rec in records.values():
        assert all(i["held"] for i in rec["invariants"])
