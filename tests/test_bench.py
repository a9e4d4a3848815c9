"""The bench command's machinery (the 1.3x target itself is measured by `make bench`)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from lab.load.bench import run_bench, run_redis_bench, run_scale
from lab.load.redisbench import find_redis_benchmark
from lab.output.bench import print_bench, scale_curve
from lab.servers import Servers
from scenarios.checkout_deadlock.checkout_deadlock import pgbench_script


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


async def test_scale_runs_each_n_on_both_sides(servers: Servers) -> None:
    """The scale curve at one small n: both sides measured, direct (it fits the server)."""
    points, version = await run_scale(servers, (5,), 1, "scaletest")
    (p,) = points
    assert p.via == "direct" and len(p.lab_ms) == len(p.pgbench_ms) == 1 and version
    assert p.to_json()["ratio"] == round(p.lab_ms[0] / p.pgbench_ms[0], 3)


def test_scale_curve_marks_each_n_against_its_target() -> None:
    """n=200 is held to 1.05, every other n to 1.10; the line says ok or ABOVE."""
    pts: list[Mapping[str, Any]] = [
        {"n": 200, "via": "direct", "lab_median_ms": 1070.0, "pgbench_median_ms": 1000.0,
         "ratio": 1.07, "target_ratio": 1.05},
        {"n": 1000, "via": "pgbouncer-transaction", "lab_median_ms": 1070.0,
         "pgbench_median_ms": 1000.0, "ratio": 1.07, "target_ratio": 1.10},
    ]  # fmt: skip
    first, second = scale_curve(pts)
    assert first.startswith("n=  200") and first.endswith("<= 1.05 ABOVE")
    assert "pgbouncer-transaction" in second and second.endswith("<= 1.10 ok")


@pytest.mark.skipif(
    find_redis_benchmark() is None, reason="redis-benchmark (Debian's redis-tools) is not installed"
)
async def test_bench_redis_reports_both_sides(servers: Servers) -> None:
    """A small `bench redis`: the stampede over 2 processes and redis-benchmark on the same
    Redis, each with the GET/s Redis counted and its CPU; the ratio is theirs."""
    d = await run_redis_bench(servers, "benchredis", n=100, procs=2, redis_client="pipelined")
    lab, ref = d["lab"], d["redis_benchmark"]
    assert lab["outcomes"] == {"ok": 100} and d["load"]["procs"] == 2
    assert lab["get_per_s"] > 0 and ref["get_per_s"] > 0 and ref["clients"] == 100
    assert d["ratio"] == round(lab["get_per_s"] / ref["get_per_s"], 3)
    assert d["demand_get_per_s"] == 99 * 1000 / 50
    assert lab["peak_rss_mb"] > 0 and "redis_cpu_per_s" in ref
    us = lab["client_cpu_per_s"] / lab["get_per_s"] * 1e6
    assert d["client_us_per_get"] == round(us, 1) and d["client_us_per_get"] > 0
    lines = _printed({"points": [d, d]})
    assert lines[1].split()[:3] == ["waiters", "demand", "lab"]
    assert [r.split()[0] for r in lines[2:4]] == ["100", "100"]  # one row per size


def _printed(data: dict[str, Any]) -> list[str]:
    """What `bench redis` prints for `data`, line by line."""
    console = Console(record=True, width=200, file=io.StringIO())
    print_bench(console, "redis", False, data)
    return console.export_text().splitlines()
