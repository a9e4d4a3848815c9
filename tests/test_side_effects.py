"""side-effects against a real provider process on loopback and real PostgreSQL deadlocks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from lab.kit.provider import PROVIDER
from lab.procs import alive as pid_alive
from scenarios.side_effects import SCENARIO
from tests.conftest import RunFn, assert_all_held
from tests.test_cli import _wait_for_children, assert_gone, interruptible


async def test_retries_repeat_side_effects_unless_keyed_or_outboxed(run_scenario: RunFn) -> None:
    """Buggy: 2 charges, a message per attempt; fixed: 1 charge (replayed), a message per commit."""
    records = await run_scenario(SCENARIO, deadlock_timeout_ms=100)
    buggy, fixed = records["buggy"], records["fixed"]
    assert len(buggy["evidence"]["provider"]["charges"]) == 2
    assert len(fixed["evidence"]["provider"]["charges"]) == 1
    assert fixed["evidence"]["provider"]["charges"][0]["key"] == "bill:c-1:2026-09"
    for rec in (buggy, fixed):
        c = rec["counters"]  # a retry may meet the survivor again: 40P01 >= 1, not == 1
        assert c["commits"] == 2 and c["40P01"] >= 1 and c["attempts"] == 2 + c["40P01"]
        assert not pid_alive(rec["evidence"]["provider_pid"])  # stopped with the run
        assert_all_held(rec["claims"])
    assert buggy["counters"]["messages"] == buggy["counters"]["attempts"]
    assert fixed["counters"]["messages"] == 2


def test_ctrl_c_leaves_no_provider(tmp_path: Path) -> None:
    """SIGINT while the job waits on the provider: exit 130, the provider process is gone."""
    args = ["run", "side-effects", "-v", "buggy", "-p", "client_timeout_s=60",
            "-p", "late_reply_s=120"]  # fmt: skip
    with interruptible(tmp_path, *args) as (proc, errfile):
        pids = _wait_for_children(proc, "provider.py", errfile)
        assert all(pid_alive(p) for p in pids)
    assert errfile.read_text().strip().splitlines()[-1].startswith("locklab: interrupted")
    assert_gone(pids)


def test_provider_dies_with_a_killed_parent() -> None:
    """SIGKILL of the process that started the provider (no cleanup runs): it dies too."""
    parent_code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, {PROVIDER!r}], stdin=subprocess.PIPE,"
        " stdout=subprocess.PIPE)\n"
        "p.stdin.write(b'{}\\n'); p.stdin.flush(); p.stdout.readline()\n"
        "print(p.pid, flush=True); time.sleep(60)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert pid_alive(child)
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    assert_gone([child])
