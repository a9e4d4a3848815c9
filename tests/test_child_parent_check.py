"""The lab's child processes exit at once when the PID they were given is not their parent:
the lab died before PR_SET_PDEATHSIG took effect, so no signal would ever stop them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).parent.parent / "scenarios"


@pytest.mark.parametrize(
    "script",
    [
        "../lab/kit/provider.py",
        "service_lock_order/worker.py",
        "lease_gc_pause/worker.py",
        "cron_rerun/pod.py",
    ],
)
def test_a_child_of_a_gone_parent_exits_before_reading_its_stdin(script: str) -> None:
    """Given PID 1 as its parent (it is not): exit 0, nothing written, though stdin stays
    open; a child that kept running would block on stdin (the timeout only guards a hang)."""
    proc = subprocess.Popen(
        [sys.executable, str(SCENARIOS / script), "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=SCENARIOS.parent,
    )
    try:
        proc.wait(timeout=120)  # stdin stays open: only the parent check ends it
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
    out, err = proc.communicate()
    assert proc.returncode == 0 and out == b"", err
