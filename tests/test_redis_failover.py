"""redis-failover on a real Redis primary, replica and three Sentinels the run owns, and
real PostgreSQL: the Sentinels, not the lab, promote the replica."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lab.core.records import Record
from lab.procs.lifecycle import lab_processes
from scenarios.redis_failover import SCENARIO
from tests.conftest import RunFn, assert_all_held
from tests.test_cli import LAB, ROOT, _children, assert_gone
from tests.test_reliability import _owned_by


def assert_sentinels_promoted(rec: Record) -> None:
    """The record's failover: three Sentinels saw the primary down, agreed, and switched
    to the replica; the events in the order they were announced, after the kill."""
    f = rec["evidence"]["failover"]
    assert (f["by"], f["sentinels"], f["quorum"]) == ("sentinel", 3, 2)
    assert f["new_primary"] == f["replica"] != f["old_primary"]
    events = [e["event"] for e in f["events"]]
    for name in ("+sdown", "+odown", "+switch-master"):
        assert name in events, events
    assert events.index("+sdown") < events.index("+odown") < events.index("+switch-master")
    assert 0 < f["switch_ms"] < 20_000


async def test_failover_loses_the_lock_and_repeats_the_fence(run_scenario: RunFn) -> None:
    """Buggy: B takes the lock on the promoted replica with A's fence; B's write is refused."""
    rec = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]
    ev = rec["evidence"]
    assert [h["who"] for h in ev["holders"]] == ["A", "B"]
    assert ev["fence_a"] == ev["fence_b"] == 6
    assert rec["outcomes"] == {"write_rejected": 1, "stale_write_rejected": 1}
    assert not rec["invariants"][0]["held"]
    assert rec["evidence"]["failover"]["lock_on_new_primary"] is None
    assert_sentinels_promoted(rec)
    assert_all_held(rec["claims"])


async def test_storage_fence_and_wait_protect_the_invoice(run_scenario: RunFn) -> None:
    """Fixed: the storage's fence orders A < B; fixed-wait: A never proceeds without a replica."""
    records = await run_scenario(SCENARIO, ["fixed", "fixed-wait"])
    fixed, waited = records["fixed"], records["fixed-wait"]
    assert (fixed["evidence"]["fence_a"], fixed["evidence"]["fence_b"]) == (6, 7)
    assert fixed["outcomes"] == {"wrote": 1, "stale_write_rejected": 1}
    assert waited["outcomes"] == {"wrote": 1, "lock_not_replicated": 1}
    for rec in (fixed, waited):
        assert_sentinels_promoted(rec)
        assert all(i["held"] for i in rec["invariants"])
        assert_all_held(rec["claims"])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_nothing_of_the_group_outlives_the_lab(tmp_path: Path, sig: int) -> None:
    """Ctrl-C or kill -9 of `locklab run redis-failover` while its three Sentinels run: the
    primary, the replica, the Sentinels and the link proxy all end (the reaper and the
    proxy's parent-death signal), and Ctrl-C says so in one line, exit non-zero."""
    env = {**os.environ, "LOCKLAB_RESULTS": str(tmp_path / "results"), "NO_COLOR": "1"}
    args = [*LAB, "run", "redis-failover", "-v", "buggy"]
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 60
        while len(_group(proc.pid, "--sentinel")) < 3:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the Sentinels never started"
            time.sleep(0.02)
        group = sorted({*_group(proc.pid, "redis-server"), *_group(proc.pid, "lab.procs.netdelay")})
        assert len(group) >= 6, group  # 3 Sentinels, primary, replica, link proxy
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    if sig == signal.SIGINT:
        assert "Traceback" not in stderr and stderr.strip().splitlines()[-1].startswith("locklab:")
    assert_gone(group, wait_s=20)


def _group(lab_pid: int, word: str) -> list[int]:
    """PIDs of the lab's servers (in its folders) and descendants whose command line has
    `word`, each once (a server is both)."""
    found = {p for p, cmd in lab_processes() if word in cmd and _owned_by(p, lab_pid)}
    return sorted(found | {p for p, cmd in _children(lab_pid) if word in cmd})
