"""The bench command's machinery (the 1.3x target itself is measured by `make bench`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lab.bench import pgbench_script, run_bench
from lab.servers import Servers


def test_pgbench_script_is_the_fixed_checkout() -> None:
    """pgbench runs the sorted checkout: two UPDATEs, 5 ms after each, one transaction."""
    script = pgbench_script(("B-2", "A-1"), 5.0)
    assert script.splitlines() == [
        "BEGIN;",
        "UPDATE inventory SET qty = qty - 1 WHERE sku = 'A-1';",
        "\\sleep 5000 us",
        "UPDATE inventory SET qty = qty - 1 WHERE sku = 'B-2';",
        "\\sleep 5000 us",
        "COMMIT;",
    ]


async def test_bench_measures_both_sides(servers: Servers) -> None:
    """One small round: the lab commits every cart and pgbench reports a wall time."""
    res = await run_bench(servers, n=10, rounds=1, run_id="benchtest")
    assert len(res.lab_ms) == 1 and len(res.pgbench_ms) == 1
    # 10 carts serialised on one row, each holding it >= 10 ms: both sides take >= 100 ms.
    assert res.lab_ms[0] >= 100 and res.pgbench_ms[0] >= 100
    assert res.to_json()["ratio"] == round(res.lab_ms[0] / res.pgbench_ms[0], 3)  # one round


def test_bench_command_keeps_a_record(servers: Servers, tmp_path: Path) -> None:
    """`locklab bench` writes what it printed, with servers and commit, under the run's
    bench/ folder (not a scenario record: `results` and `report` do not read it)."""
    assert servers.pg is not None
    env = {**os.environ, "LOCKLAB_RESULTS": str(tmp_path), "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "lab.cli", "bench", "-n", "5", "--rounds", "1", "--json",
         "--pg-dsn", servers.pg.dsn],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (saved,) = tmp_path.glob("*/bench/result.json")
    data = json.loads(saved.read_text())
    assert data["ratio"] == json.loads(proc.stdout)["ratio"]
    assert data["servers"]["postgresql"]["version"] and "git_commit" in data
