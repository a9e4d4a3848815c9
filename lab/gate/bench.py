"""`locklab bench gate`: what the gate costs in pass-through, against the proxy users
already run.

pgbench's built-in `tpcb-like` and `select-only` scripts at 1 and 16 clients, each
straight to PostgreSQL, through PgBouncer (session pooling, a pool as large as the
clients) and through `locklab gate` (its own process, as a user runs it), interleaved
in every round so that the machine's drift falls on all three alike. The medians of the
rounds are printed, with the ratio gate / PgBouncer, and at 1 client the latency each
proxy adds per statement (pgbench's average latency over the script's statements).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import statistics
import sys
import urllib.parse
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from lab.errors import LabError
from lab.load.bench import find_pgbench
from lab.servers import Servers, extra_pgbouncer
from lab.servers.pgbouncer import pgbouncer_missing
from lab.spec.wire import parse_dsn

SCRIPTS = {"tpcb-like": 7, "select-only": 1}  # statements per transaction
CLIENTS = (1, 16)
ROUTES = ("direct", "pgbouncer", "gate")
BENCH_DB = "locklab_bench_gate"


@dataclass
class Sample:
    tps: float
    latency_ms: float


@dataclass
class GateBench:
    seconds: int
    rounds: int
    pgbench: str
    samples: dict[tuple[str, int, str], list[Sample]] = field(default_factory=dict)
    missing: str | None = None  # why a route was not run (PgBouncer not installed)

    def median(self, script: str, clients: int, route: str) -> Sample | None:
        got = self.samples.get((script, clients, route))
        if not got:
            return None
        return Sample(
            statistics.median(s.tps for s in got), statistics.median(s.latency_ms for s in got)
        )

    def added_us(self, script: str, route: str) -> float | None:
        """At 1 client: the latency `route` adds per statement, in microseconds."""
        via, direct = self.median(script, 1, route), self.median(script, 1, "direct")
        if via is None or direct is None:
            return None
        return (via.latency_ms - direct.latency_ms) * 1000 / SCRIPTS[script]

    def to_json(self) -> dict[str, object]:
        rows = []
        for script in SCRIPTS:
            for clients in CLIENTS:
                row: dict[str, object] = {"script": script, "clients": clients}
                for route in ROUTES:
                    m = self.median(script, clients, route)
                    row[route] = None if m is None else {"tps": m.tps, "latency_ms": m.latency_ms}
                rows.append(row)
        return {
            "seconds": self.seconds,
            "rounds": self.rounds,
            "pgbench": self.pgbench,
            "missing": self.missing,
            "rows": rows,
            "added_us_per_statement": {
                script: {r: self.added_us(script, r) for r in ("pgbouncer", "gate")}
                for script in SCRIPTS
            },
        }


async def run_gate_bench(
    servers: Servers, seconds: int, rounds: int, progress: Callable[[str], None]
) -> GateBench:
    assert servers.pg is not None
    pgbench, version = find_pgbench(servers)
    result = GateBench(seconds, rounds, version)
    result.missing = pgbouncer_missing(servers.pg.info.kind != "embedded")
    dsn = servers.pg.dsn
    await _pgbench_init(pgbench, dsn)
    try:
        async with _routes(servers, result.missing is None) as routes:
            for r in range(rounds):
                for script in SCRIPTS:
                    for clients in CLIENTS:
                        for route, target in routes.items():
                            progress(
                                f"round {r + 1}/{rounds}: {script}, {clients} clients, {route}"
                            )
                            sample = await _pgbench(pgbench, target, script, clients, seconds)
                            result.samples.setdefault((script, clients, route), []).append(sample)
    finally:
        await _drop(pgbench, dsn)
    return result


@contextlib.asynccontextmanager
async def _routes(servers: Servers, bouncer: bool) -> AsyncIterator[dict[str, str]]:
    """DSNs of the bench database: direct, through PgBouncer (when installed), through a
    gate process."""
    assert servers.pg is not None
    dsn = _with_db(servers.pg.dsn)
    routes = {"direct": dsn}
    stop_bouncer: Callable[[], None] | None = None
    if bouncer:
        port = int(servers.pg.info.address.rsplit(":", 1)[1])
        via, stop_bouncer = extra_pgbouncer(servers, "session", port, pool_size=max(CLIENTS) + 4)
        routes["pgbouncer"] = _with_db(via)
    gate = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "lab.cli",
        "gate",
        env={**os.environ, "LOCKLAB_PG_DSN": servers.pg.dsn},  # not on a command line
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert gate.stdout is not None
        first = (await asyncio.wait_for(gate.stdout.readline(), 60)).decode()
        found = re.match(r"gate: 127\.0\.0\.1:(\d+) ", first)
        if not found:
            raise LabError(f"locklab gate did not start: {first.strip() or 'no output'}")
        keys = parse_dsn(dsn)
        routes["gate"] = _with_db(
            f"postgresql://{urllib.parse.quote(keys.get('user', ''))}:"
            f"{urllib.parse.quote(keys.get('password', ''))}@127.0.0.1:{found[1]}/x"
        )
        yield routes
    finally:
        if gate.returncode is None:
            gate.send_signal(signal.SIGTERM)
            await gate.wait()
        if stop_bouncer is not None:
            stop_bouncer()


def _with_db(dsn: str) -> str:
    url = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(url._replace(path=f"/{BENCH_DB}"))


def _env(dsn: str) -> tuple[list[str], dict[str, str]]:
    """pgbench's connection arguments and environment: the password only in PGPASSWORD."""
    keys = parse_dsn(dsn)
    args = ["-h", keys.get("host", "127.0.0.1"), "-p", keys.get("port", "5432")]
    args += ["-U", keys.get("user", "postgres")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    if keys.get("password"):
        env["PGPASSWORD"] = keys["password"]
    return args, env


async def _run(pgbench: Path, dsn: str, *args: str, database: str = BENCH_DB) -> str:
    conn, env = _env(dsn)
    proc = await asyncio.create_subprocess_exec(
        str(pgbench),
        *conn,
        *args,
        database,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        last = (err.decode().strip().splitlines() or ["no output"])[-1]
        raise LabError(f"pgbench {' '.join(args[:2])} failed: {last}")
    return out.decode()


async def _pgbench_init(pgbench: Path, dsn: str) -> None:
    import asyncpg

    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{BENCH_DB}"')
    finally:
        await admin.close()
    await _run(pgbench, dsn, "-i", "-q", "-s", "1")


async def _drop(pgbench: Path, dsn: str) -> None:
    import asyncpg

    with contextlib.suppress(Exception):
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{BENCH_DB}" WITH (FORCE)')
        finally:
            await admin.close()


async def _pgbench(pgbench: Path, dsn: str, script: str, clients: int, seconds: int) -> Sample:
    jobs = str(min(clients, 2))
    args = ["-n", "-b", script, "-c", str(clients), "-j", jobs, "-T", str(seconds)]
    text = await _run(pgbench, dsn, *args)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", text)
    latency = re.search(r"latency average = ([\d.]+) ms", text)
    if not tps or not latency:
        raise LabError(f"pgbench printed no tps for {script} at {clients} clients")
    return Sample(float(tps[1]), float(latency[1]))
