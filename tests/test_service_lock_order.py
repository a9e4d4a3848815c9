"""service-lock-order: two real service processes on one real Redis."""

from __future__ import annotations

from pathlib import Path

from lab.procs import alive as pid_alive
from scenarios.service_lock_order import SCENARIO
from tests.conftest import RunFn, assert_all_held
from tests.test_cli import _wait_for_children, assert_gone, interruptible


async def test_opposite_orders_freeze_sorted_orders_complete(run_scenario: RunFn) -> None:
    """Buggy: a two-service cycle in Redis, both alive and polling, killed; fixed: both done."""
    records = await run_scenario(SCENARIO, params={"freeze_window_ms": 300})
    buggy, fixed = records["buggy"], records["fixed"]
    f = buggy["evidence"]["freeze"]
    assert buggy["outcomes"] == {"frozen": 2}
    assert f["holders"] == {"lock:account:A": "billing", "lock:account:B": "inventory"}
    assert f["waits_for"] == {"billing": "lock:account:B", "inventory": "lock:account:A"}
    assert f["window_ms"] >= 300 and f["redis_set_calls"] > 0
    assert fixed["outcomes"] == {"done": 2} and "freeze" not in fixed["evidence"]
    for rec in (buggy, fixed):
        assert_all_held(rec["claims"])


def test_ctrl_c_leaves_no_service(tmp_path: Path) -> None:
    """SIGINT while the two services are frozen: exit 130, neither process is left."""
    args = ["run", "service-lock-order", "-v", "buggy", "-p", "freeze_window_ms=60000"]
    with interruptible(tmp_path, *args) as (proc, errfile):
        pids = _wait_for_children(proc, "service_lock_order/worker.py", errfile)
        while len(pids) < 2:
            pids = _wait_for_children(proc, "service_lock_order/worker.py", errfile)
        assert all(pid_alive(p) for p in pids)
    assert_gone(pids)
