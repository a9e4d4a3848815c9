"""How much the lab's harness adds: the fixed checkout through locklab vs through pgbench.

Both run the same transaction (two UPDATEs in sorted SKU order, 5 ms of "other logic"
after each) from 200 clients connected before the clock starts, all released at once,
against the same server. pgbench's wall time is its transaction count divided by its
tps "without initial connection time". Rounds alternate lab / pgbench so drift on a
shared machine hits both; the ratio of medians is what we report.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from lab.errors import LabError
from lab.runner import RunPlan, admin_connect, database_name, run_plan
from lab.servers import Servers
from lab.servers.base import with_database, without_password
from lab.workload import Knobs

TARGET_RATIO = 1.3


@dataclass
class BenchResult:
    n: int
    rounds: int
    lab_ms: list[float]
    pgbench_ms: list[float]
    pgbench: str

    @property
    def ratio(self) -> float:
        return statistics.median(self.lab_ms) / statistics.median(self.pgbench_ms)

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "rounds": self.rounds,
            "lab_ms": self.lab_ms,
            "pgbench_ms": self.pgbench_ms,
            "lab_median_ms": statistics.median(self.lab_ms),
            "pgbench_median_ms": statistics.median(self.pgbench_ms),
            "ratio": round(self.ratio, 3),
            "target_ratio": TARGET_RATIO,
            "pgbench": self.pgbench,
        }


def pgbench_script(skus: tuple[str, ...], pause_ms: float) -> str:
    lines = ["BEGIN;"]
    for sku in sorted(skus):
        lines.append(f"UPDATE inventory SET qty = qty - 1 WHERE sku = '{sku}';")
        lines.append(f"\\sleep {int(pause_ms * 1000)} us")
    lines.append("COMMIT;")
    return "\n".join(lines) + "\n"


def _write_script(text: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(text)
        return f.name


def find_pgbench(servers: Servers) -> tuple[Path, str]:
    """pgbench from the server's own binaries when known, else PATH; with its version."""
    path: Path | None = None
    if servers.pg is not None and servers.pg.bindir is not None:
        candidate = servers.pg.bindir / "pgbench"
        path = candidate if candidate.is_file() else None
    if path is None:
        found = shutil.which("pgbench")
        if not found:
            raise LabError("pgbench not found (it ships with PostgreSQL); set LOCKLAB_PG_BINDIR")
        path = Path(found)
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, check=False)
    return path, out.stdout.strip()


async def _pgbench_round(servers: Servers, pgbench: Path, n: int, run_id: str) -> float:
    from scenarios.checkout_deadlock import INITIAL_QTY, SKUS

    assert servers.pg is not None
    database = database_name(run_id, "bench", "pgbench")
    admin = await admin_connect(servers)
    try:
        await admin.execute(f'CREATE DATABASE "{database}"')
        conn = await asyncpg.connect(servers.pg.dsn, database=database)
        try:
            await conn.execute("CREATE TABLE inventory (sku text PRIMARY KEY, qty int NOT NULL)")
            await conn.executemany(
                "INSERT INTO inventory VALUES ($1, $2)", [(s, INITIAL_QTY) for s in SKUS]
            )
        finally:
            await conn.close()
        script = await asyncio.to_thread(_write_script, pgbench_script(SKUS, 5.0))
        try:
            cmd = [str(pgbench), "-n", "-c", str(n), "-j", "2", "-t", "1", "-f", script]
            dsn, password = without_password(with_database(servers.pg.dsn, database))
            env = {**os.environ, **({"PGPASSWORD": password} if password else {})}
            proc = await asyncio.create_subprocess_exec(
                *cmd, dsn, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
            )
            out, errout = await proc.communicate()
        finally:
            await asyncio.to_thread(Path(script).unlink, missing_ok=True)
        text = out.decode()
        m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", text)
        if proc.returncode != 0 or not m:
            raise LabError(f"pgbench failed: {(errout.decode() or text).strip().splitlines()[-1:]}")
        return n / float(m[1]) * 1000
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await admin.close()


async def run_bench(servers: Servers, n: int, rounds: int, run_id: str) -> BenchResult:
    from scenarios.checkout_deadlock import SCENARIO

    pgbench, version = find_pgbench(servers)
    lab_ms: list[float] = []
    pg_ms: list[float] = []
    for r in range(rounds):
        knobs = Knobs(n, "burst", "per-actor", 1000, r + 1, 120.0, 600.0)
        plan = RunPlan(
            SCENARIO, ["fixed"], knobs, dict(SCENARIO.params), f"{run_id}{r}", write=False
        )
        (rec,) = await run_plan(plan, servers)
        if rec["outcomes"] != {"ok": n}:
            raise LabError(
                f"bench: the fixed checkout did not commit every cart: {rec['outcomes']}"
            )
        lab_ms.append(rec["wall_ms"])
        pg_ms.append(await _pgbench_round(servers, pgbench, n, f"{run_id}{r}"))
    return BenchResult(n, rounds, lab_ms, pg_ms, version)
