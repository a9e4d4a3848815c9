"""redlock on five real Redis servers the run starts, a real SIGSTOP, and real PostgreSQL."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lab.core.records import Record
from lab.procs import alive as pid_alive
from scenarios.redlock import SCENARIO
from tests.conftest import RunFn, assert_all_held
from tests.test_cli import _children, assert_gone, interruptible


def _ev(rec: Record, who: str, name: str) -> dict[str, Any]:
    return next(e for e in rec["trace"] if e["who"] == who and e["event"] == name)


async def test_frozen_holder_and_quorum_winner_both_hold(run_scenario: RunFn) -> None:
    """Both variants: A wins 5/5, is frozen past its validity, B wins the quorum, both believe."""
    records = await run_scenario(SCENARIO, params={"ttl_ms": 200})
    for name, rec in records.items():
        qa, qb = _ev(rec, "A", "quorum"), _ev(rec, "B", "quorum")
        assert qa["votes"] >= 3 and qb["votes"] >= 3 and qa["nodes"] == 5, name
        assert 0 < qa["validity_ms"] < 200 and _ev(rec, "A", "resume")["frozen_ms"] > 200
        assert rec["evidence"]["beliefs"]["both_ms"] > 0
        assert rec["evidence"]["a_state_after_b_write"] in ("T", "t")
        assert len(rec["evidence"]["nodes"]) == 5
        assert "@" not in str(rec["evidence"]["nodes"])  # no password in the record
        assert not any(pid_alive(p) for p in rec["evidence"]["node_pids"])  # stopped after
        assert_all_held(rec["claims"])
    fixed, buggy = records["fixed"], records["buggy"]
    assert fixed["outcomes"] == {"wrote": 1, "write_rejected": 1}
    assert fixed["evidence"]["final_row"]["body"] == "from B"
    assert buggy["outcomes"] == {"wrote": 2}
    assert buggy["evidence"]["final_row"] == {"id": 42, "body": "from A", "fence": 1}


async def test_one_node_is_its_own_majority(run_scenario: RunFn) -> None:
    """-p nodes=1: the quorum is that one node, and the same fence verdict follows."""
    rec = (await run_scenario(SCENARIO, ["fixed"], params={"nodes": 1, "ttl_ms": 100}))["fixed"]
    assert _ev(rec, "A", "quorum")["nodes"] == 1
    assert rec["outcomes"] == {"wrote": 1, "write_rejected": 1}


def test_ctrl_c_leaves_no_redis_node_or_worker(tmp_path: Path) -> None:
    """SIGINT while A is frozen: exit 130; none of the five nodes nor A's process is left."""
    args = ["run", "redlock", "-v", "fixed", "-p", "ttl_ms=60000"]  # A stays frozen a minute
    with interruptible(tmp_path, *args) as (proc, errfile):
        pids: list[int] = []
        for _ in range(600):
            kids = _children(proc.pid)
            # redis-server rewrites its title; redlock uses no Redis of the lab's own
            nodes = [p for p, args in kids if "redis-server" in args]
            worker = [p for p, args in kids if "lease_gc_pause/worker.py" in args]
            if len(nodes) == 5 and worker:
                pids = nodes + worker
                break
            time.sleep(0.05)
        assert len(pids) == 6, errfile.read_text()
        assert all(pid_alive(p) for p in pids)
    assert errfile.read_text().strip().splitlines()[-1].startswith("locklab: interrupted")
    assert_gone(pids)
    assert not list(tmp_path.rglob("*.json"))


def test_the_shared_steps_write_no_wait_loop_of_their_own() -> None:
    """scenarios/lease_gc_pause/overlap.py (redlock's and lease-busy-loop's actions) passes
    the shape check the scenario folders pass: its waits are lab.aio's, not a `while`."""
    import scenarios.lease_gc_pause.overlap as steps
    from tests.test_shape import violations

    path = Path(str(steps.__file__))
    assert violations(path.read_text(), path.name) == []
