"""How much the lab's harness adds, each time against a reference tool in the same run.

`locklab bench` (checkout): the fixed checkout through locklab vs through pgbench. Both
run the same transaction (two UPDATEs in sorted SKU order, 5 ms of "other logic" after
each) from 200 clients connected before the clock starts, all released at once, against
the same server. pgbench's wall time is its transaction count divided by its tps "without
initial connection time". Rounds alternate lab / pgbench so drift on a shared machine
hits both; the ratio of medians is what we report. `--scale` does the same at n = 50,
100, 200, 400 and 1000 (above what the server accepts, both through PgBouncer).

`locklab bench redis`: the buggy cache stampede at 5,000 waiters and a 1 s rebuild, then
`redis-benchmark -t get` with one connection per waiter, on the same Redis; GET/s as
Redis counted them (INFO commandstats), each side's CPU, the lab's peak memory.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncpg

from lab.core.knobs import Knobs
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.load.databases import admin_connect, database_name
from lab.load.plan import RunPlan
from lab.load.runner import run_plan
from lab.servers import Servers
from lab.servers.base import with_database, without_password

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


def benched(what: str) -> Scenario:
    """The scenario that declares the reference `what` ("pgbench", "redis")."""
    from scenarios import SCENARIOS

    for sc in SCENARIOS:
        if sc.pgbench if what == "pgbench" else sc.bench_redis:
            return sc
    raise LabError(f"bench: no scenario declares a {what} reference")


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


async def _pgbench_round(
    servers: Servers, pgbench: Path, n: int, run_id: str, via: str | None = None
) -> float:
    """One pgbench run of the declared reference; `via`: a PgBouncer DSN to connect through."""
    reference = benched("pgbench").pgbench
    assert servers.pg is not None and reference is not None
    database = database_name(run_id, "bench", "pgbench")
    admin = await admin_connect(servers)
    try:
        await admin.execute(f'CREATE DATABASE "{database}"')
        conn = await asyncpg.connect(servers.pg.dsn, database=database)
        try:
            for statement in reference.setup:
                await conn.execute(statement)
        finally:
            await conn.close()
        script = await asyncio.to_thread(_write_script, reference.script)
        try:
            cmd = [str(pgbench), "-n", "-c", str(n), "-j", "2", "-t", "1", "-f", script]
            dsn, password = without_password(with_database(via or servers.pg.dsn, database))
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
    sc = benched("pgbench")
    pgbench, version = find_pgbench(servers)
    lab_ms: list[float] = []
    pg_ms: list[float] = []
    for r in range(rounds):
        knobs = Knobs(n, "burst", "per-actor", 1000, r + 1, 120.0, 600.0)
        plan = RunPlan(sc, ["fixed"], knobs, dict(sc.params), f"{run_id}{r}", write=False)
        (rec,) = await run_plan(plan, servers)
        if rec["outcomes"] != {"ok": n}:
            raise LabError(
                f"bench: the fixed checkout did not commit every cart: {rec['outcomes']}"
            )
        lab_ms.append(rec["wall_ms"])
        pg_ms.append(await _pgbench_round(servers, pgbench, n, f"{run_id}{r}"))
    return BenchResult(n, rounds, lab_ms, pg_ms, version)


# --- the scale curve: the same comparison at several n ------------------------------------

SCALE_NS = (50, 100, 200, 400, 1000)
SCALE_TARGET_AT_200 = 1.05
SCALE_TARGET = 1.10
DIRECT_HEADROOM = 10  # connections left free on the server besides the clients


@dataclass
class ScalePoint:
    n: int
    via: str  # "direct" | "pgbouncer-transaction" (above what the server accepts)
    lab_ms: list[float]
    pgbench_ms: list[float]

    @property
    def ratio(self) -> float:
        return statistics.median(self.lab_ms) / statistics.median(self.pgbench_ms)

    @property
    def target(self) -> float:
        return SCALE_TARGET_AT_200 if self.n == 200 else SCALE_TARGET

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "via": self.via,
            "lab_ms": self.lab_ms,
            "pgbench_ms": self.pgbench_ms,
            "lab_median_ms": statistics.median(self.lab_ms),
            "pgbench_median_ms": statistics.median(self.pgbench_ms),
            "ratio": round(self.ratio, 3),
            "target_ratio": self.target,
        }


async def _free_connections(servers: Servers) -> int:
    from lab.load.databases import probe_pg

    admin = await admin_connect(servers)
    try:
        return await probe_pg(admin, servers)
    finally:
        await admin.close()


async def run_scale(
    servers: Servers, ns: tuple[int, ...], rounds: int, run_id: str
) -> tuple[list[ScalePoint], str]:
    """The fixed checkout through the lab and through pgbench at every n; above what the
    server accepts both go through the lab's PgBouncer in transaction mode."""
    sc = benched("pgbench")
    pgbench, version = find_pgbench(servers)
    free = await _free_connections(servers)
    points: list[ScalePoint] = []
    for n in ns:
        direct = n + DIRECT_HEADROOM <= free
        if not direct and "transaction" not in servers.pgbouncer:
            raise LabError(
                f"bench --scale: n={n} is above what PostgreSQL accepts ({free}) and no "
                "PgBouncer is available (Debian: apt-get install pgbouncer)"
            )
        via = "direct" if direct else "pgbouncer-transaction"
        point = ScalePoint(n, via, [], [])
        for r in range(rounds):
            rid = f"{run_id}s{n}r{r}"
            knobs = Knobs(n, "burst", "per-actor" if direct else via, 1000, r + 1, 120.0, 900.0)
            plan = RunPlan(sc, ["fixed"], knobs, dict(sc.params), rid, write=False)
            (rec,) = await run_plan(plan, servers)
            if rec["outcomes"] != {"ok": n}:
                raise LabError(f"bench: the fixed checkout at n={n} did not commit every cart")
            point.lab_ms.append(rec["wall_ms"])
            bouncer = None if direct else servers.pgbouncer["transaction"]
            point.pgbench_ms.append(await _pgbench_round(servers, pgbench, n, rid, bouncer))
        points.append(point)
    return points, version


# --- Redis: the 5,000-waiter stampede against redis-benchmark on the same Redis ------------


async def run_redis_bench(
    servers: Servers, run_id: str, *, n: int, procs: int, redis_client: str
) -> dict[str, Any]:
    """The buggy stampede (its declared case: the documents' 1 s rebuild) and `redis-benchmark -t get` at one
    connection per waiter, on the same Redis, one after the other; GET/s as Redis counted
    them, CPU of each side, the lab's peak memory."""
    from lab.core.profiles import PUBLISHED, profile_settings
    from lab.load.redisbench import find_redis_benchmark

    sc = benched("redis")
    if find_redis_benchmark() is None:
        raise LabError("redis-benchmark not found (Debian: apt-get install redis-tools)")
    knobs, params = profile_settings(sc, PUBLISHED, case=sc.bench_redis)
    knobs = replace(knobs, n=n, procs=procs, redis_client=redis_client)
    params["reference"] = True
    plan = RunPlan(sc, ["buggy"], knobs, params, run_id, write=False, case=sc.bench_redis)
    (rec,) = await run_plan(plan, servers)
    w = rec["evidence"].get("wait_window") or {}
    ref = w.get("redis_benchmark") or {}
    if not w or "error" in ref or not ref:
        raise LabError(f"bench redis: {ref.get('error') or 'the run recorded no wait window'}")
    demand = w["demand_get_per_s"]
    return {
        "n": n,
        "rebuild_ms": params["rebuild_ms"],
        "poll_ms": params["poll_ms"],
        "load": rec["load"],
        "lab": {
            "get_per_s": w["get_per_s"],
            "window_ms": w["ms"],
            "gets": w["gets"],
            "client_cpu_per_s": w["client_cpu_per_s"],
            "redis_cpu_per_s": w["redis_cpu_per_s"],
            "machine_busy": w.get("machine_busy"),
            "limit": w["limit"],
            "outcomes": rec["outcomes"],
            "wall_ms": rec["wall_ms"],
            "peak_rss_mb": rec["load"]["lab_peak_rss_mb"],
        },
        "redis_benchmark": ref,
        "demand_get_per_s": demand,
        "demand_share": round(w["get_per_s"] / max(demand, 1), 3),
        # the client's CPU per GET Redis counted (each poll also sends a SET NX)
        "client_us_per_get": round(w["client_cpu_per_s"] / max(w["get_per_s"], 1) * 1e6, 1),
        "ratio": round(w["get_per_s"] / max(ref["get_per_s"], 1), 3),
        "target_ratio": REDIS_TARGET_RATIO,
    }


REDIS_TARGET_RATIO = 0.5
REDIS_SIZES = (500, 1000, 2000, 5000)  # `bench redis` without -n: the stampede at each
