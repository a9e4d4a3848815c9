"""Shared fixtures: one set of real servers for the whole session, and a way to run plans.

Servers come from the lab's own pytest plugin (lab/pytest_plugin.py), which resolves them
as the CLI does: LOCKLAB_PG_DSN / LOCKLAB_REDIS_URL when set, else kept servers, else
embedded servers started here and stopped at exit (Docker only with LOCKLAB_SERVERS=docker)
(asyncpg's test base does the same with PGHOST).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from lab.core.knobs import Knobs
from lab.core.profiles import PUBLISHED, profile_settings
from lab.core.records import Record, Verdict
from lab.core.scenario import Scenario
from lab.load.plan import RunPlan
from lab.load.runner import run_plan
from lab.pytest_plugin import ServerNeeds
from lab.servers import Servers
from lab.servers.pgbouncer import pgbouncer_missing

RunFn = Callable[..., Awaitable[dict[str, Record]]]

# Tests read the lab's output as a pipe shows it. A runner's FORCE_COLOR (rich then draws
# cursor moves and styles into a pipe) or COLUMNS must not change what they read; the
# lab's subprocesses inherit this environment.
for _var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES"):
    os.environ.pop(_var, None)


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, a TMPDIR of the worker's own. Every `locklab` command first
    sweeps the user's lab folders whose owner died (lab/procs/lifecycle.py); with one
    TMPDIR, a command in one worker would stop, and report in one more stderr line, what a
    test in the other killed on purpose for its own next command to sweep
    (tests/test_reliability.py). Its servers, lab folders and kept-servers state go here."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    folder = tempfile.mkdtemp(prefix=f"locklab-{worker}-")
    os.chmod(folder, 0o711)  # as root, the server user passes through to its data folder
    os.environ["TMPDIR"] = tempfile.tempdir = folder
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def pgbouncer_available() -> bool:
    """PgBouncer comes from the system (`.ci/run` installs Debian's) or from the user."""
    return pgbouncer_missing(bool(os.environ.get("LOCKLAB_PG_DSN"))) is None


@pytest.fixture(scope="session")
def locklab_server_needs() -> ServerNeeds:
    """The plugin's servers (lab/pytest_plugin.py), with PgBouncer where there is one."""
    return ServerNeeds(pgbouncer=pgbouncer_available())


@pytest.fixture(scope="session")
def servers(locklab_servers: Servers) -> Servers:
    """The session's servers: the plugin's `locklab_servers`, under the name tests use."""
    return locklab_servers


def knobs_for(scenario: Scenario, **overrides: Any) -> Knobs:
    """The scenario's published knobs (seed 1), with `overrides` replacing some."""
    knobs, _ = profile_settings(scenario, PUBLISHED)
    return replace(knobs, **overrides)


@pytest.fixture
def run_scenario(servers: Servers) -> RunFn:
    """`await run_scenario(SCENARIO, ["buggy"], n=4, params={...})` -> records by variant."""

    async def run(
        scenario: Scenario,
        variants: list[str] | None = None,
        params: dict[str, Any] | None = None,
        **knobs: Any,
    ) -> dict[str, Record]:
        plan = RunPlan(
            scenario=scenario,
            variants=variants or list(scenario.variants),
            knobs=knobs_for(scenario, **knobs),
            params={**scenario.params, **(params or {})},
            run_id="test",
            write=False,
        )
        records = await run_plan(plan, servers)
        return {r["variant"]: r for r in records}

    return run


def assert_all_held(verdicts: Sequence[Verdict]) -> None:
    """Some claims were judged, and every one held (an empty list is a failure: a run that
    judged nothing proves nothing)."""
    assert verdicts, "no claim was judged"
    failed = [v for v in verdicts if not v["held"]]
    assert not failed, failed


def claims_of(record: Record) -> dict[str, list[bool]]:
    """Claim id -> verdicts in one record (an id may be checked by several claims)."""
    out: dict[str, list[bool]] = {}
    for c in record["claims"]:
        out.setdefault(c["id"], []).append(c["held"])
    return out


@contextlib.asynccontextmanager
async def throwaway_database(
    servers: Servers, prefix: str, rows: int = 1, settings: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """A database of its own with table `t (id, v)` holding `rows` rows to fight over, and
    the given database settings (e.g. deadlock_timeout); dropped afterwards. Its name."""
    assert servers.pg is not None
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(servers.pg.dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    for key, value in (settings or {}).items():
        await admin.execute(f"ALTER DATABASE \"{name}\" SET {key} = '{value}'")
    try:
        conn = await asyncpg.connect(servers.pg.dsn, database=name)
        await conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)")
        await conn.execute("INSERT INTO t SELECT g, 0 FROM generate_series(1, $1) g", rows)
        await conn.close()
        yield name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


# --- a throwaway database, its observer and two sessions (test_sequencer, test_interleave) ---
# A module that needs other rows or settings overrides `database`; `db` and `sessions`
# then open on its database.


@pytest.fixture
async def database(servers: Servers) -> AsyncIterator[str]:
    """A throwaway database with one row to fight over; its name."""
    async with throwaway_database(servers, "locklab_test") as name:
        yield name


@pytest.fixture
async def db(servers: Servers, database: str) -> AsyncIterator[asyncpg.Pool]:
    """The observer: a small pool on the throwaway database."""
    assert servers.pg is not None
    pool = await asyncpg.create_pool(servers.pg.dsn, database=database, min_size=1, max_size=3)
    assert pool is not None
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
async def sessions(servers: Servers, database: str) -> AsyncIterator[list[asyncpg.Connection]]:
    """Two sessions of their own on the throwaway database, ended (not closed politely: a
    failed test may leave one blocked) after the test."""
    assert servers.pg is not None
    conns = [await asyncpg.connect(servers.pg.dsn, database=database) for _ in range(2)]
    try:
        yield conns
    finally:
        for c in conns:
            c.terminate()


# --- PostgreSQL's own isolationtester (test_spec, test_gate_explore) ---


def _pg_config(servers: Servers) -> str | None:
    assert servers.pg is not None
    if servers.pg.bindir is not None and (servers.pg.bindir / "pg_config").is_file():
        return str(servers.pg.bindir / "pg_config")
    return shutil.which("pg_config")


@pytest.fixture(scope="session")
def tester(servers: Servers) -> tuple[Path, dict[str, str]]:
    """The isolationtester of the server's own build, and the environment it runs in (its
    build's libpq first: the system's may lack what a newer tester calls)."""
    pg_config = _pg_config(servers)
    if pg_config is None:
        pytest.skip("no pg_config: cannot find isolationtester")
    ask = [pg_config, "--pgxs", "--libdir"]
    pgxs, libdir = subprocess.run(ask, capture_output=True, text=True, check=True).stdout.split()
    binary = Path(pgxs).parent.parent / "test" / "isolation" / "isolationtester"
    if not binary.is_file():
        pytest.skip(f"isolationtester is not installed beside {pgxs}")
    env = {k: v for k, v in os.environ.items() if k != "PGAPPNAME"}
    env["LD_LIBRARY_PATH"] = libdir
    return binary, env
