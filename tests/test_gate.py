"""The gate on the wire, against the real server: drivers log in through it unchanged
(SCRAM, an SSLRequest answered 'N'), each statement group is held until its keeper lets it
go, the server's ReadyForQuery ends it, and a CancelRequest reaches the real backend."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import signal
import subprocess
import sys
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import asyncpg
import pytest
from rich.console import Console

from lab.gate import Gate, Group, Session, gate_dsn, upstream_of, wire
from lab.gate.actors import Actor
from lab.gate.explore import Order
from lab.gate.order import OrderRun
from lab.gate.wire import Statement
from lab.output.actors import print_order
from lab.servers import Servers

PSQL = shutil.which("psql") or next(
    (p for p in ("/usr/lib/postgresql/15/bin/psql",) if os.path.exists(p)), None
)


@dataclass
class Keeper:
    """Holds every step until the test lets it go (when `hold`), and notes what it saw."""

    steps: list[tuple[str, str]] = field(default_factory=list)
    readies: list[tuple[str, str, list[str]]] = field(default_factory=list)
    logged_in: list[Session] = field(default_factory=list)
    betweens: list[str] = field(default_factory=list)  # sessions of groups that are no step
    hold: bool = False
    arrived: asyncio.Queue[tuple[Session, Group]] = field(default_factory=asyncio.Queue)
    go: asyncio.Event = field(default_factory=asyncio.Event)

    async def opened(self, session: Session) -> None:
        self.logged_in.append(session)

    async def step(self, session: Session, group: Group) -> None:
        self.steps.append((session.name, group.shown()))
        await self.arrived.put((session, group))
        if self.hold:
            await self.go.wait()
            self.go.clear()

    async def between(self, session: Session, group: Group) -> None:
        self.betweens.append(session.name)

    def ready(self, session: Session, errors: list[str]) -> None:
        self.readies.append((session.name, session.status, errors))

    def closed(self, session: Session) -> None:
        pass


@asynccontextmanager
async def connected(
    dsn: str, ssl: Literal["prefer"] | None = None
) -> AsyncIterator[asyncpg.Connection]:
    """An asyncpg connection (the driver's own default for `ssl`), closed however the
    block ends."""
    conn = await asyncpg.connect(dsn, ssl=ssl)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def gate(servers: Servers, database: str) -> AsyncIterator[tuple[Gate, Keeper, str]]:
    assert servers.pg is not None
    keeper = Keeper()
    log = io.StringIO()
    async with Gate(upstream_of(servers.pg.dsn), keeper, log) as g:
        g.log_text = log  # type: ignore[attr-defined]
        yield g, keeper, gate_dsn(servers.pg.dsn, g.port, database)


async def test_pass_through_logs_in_with_scram_and_answers(servers: Servers, database: str) -> None:
    """Nothing gated: asyncpg logs in through the gate with SCRAM and gets its answers."""
    assert servers.pg is not None
    gate = Gate(upstream_of(servers.pg.dsn))
    async with gate as g, connected(gate_dsn(servers.pg.dsn, g.port, database), ssl="prefer") as c:
        assert await c.fetchval("SELECT count(*) FROM t") == 1
        assert await c.fetchval("SELECT $1::int + 1", 41) == 42


async def test_statements_are_steps_and_ready_for_query_ends_them(
    gate: tuple[Gate, Keeper, str],
) -> None:
    """Each statement is one step; ReadyForQuery's status byte and errors end it; the log
    shows it."""
    g, keeper, dsn = gate
    async with connected(dsn) as conn:
        await conn.execute("BEGIN")
        await conn.execute("UPDATE t SET v = v + $1 WHERE id = 1", 5)
        with pytest.raises(asyncpg.UndefinedTableError):
            await conn.execute("SELECT * FROM no_such_table")
        await conn.execute("ROLLBACK")
    session = keeper.logged_in[0]
    assert session.pid == g.sessions[0].pid > 0
    shown = [text for _, text in keeper.steps]
    assert shown[-4:] == [
        "BEGIN",
        "UPDATE t SET v = v + $1 WHERE id = 1  -- ('5')",
        "SELECT * FROM no_such_table",
        "ROLLBACK",
    ]
    # the status byte after each: in a transaction, still in it, failed, idle again
    assert [(s, e) for _, s, e in keeper.readies[-4:]] == [
        ("T", []),
        ("T", []),
        ("E", ["42P01"]),
        ("I", []),
    ]
    log = g.log_text.getvalue()  # type: ignore[attr-defined]
    assert f"s1 connected pid={session.pid}" in log
    assert "s1 UPDATE t SET v = v + $1 WHERE id = 1  -- ('5')\n" in log
    assert "s1 error 42P01\n" in log


async def test_a_held_statement_does_not_reach_the_server(
    gate: tuple[Gate, Keeper, str], servers: Servers
) -> None:
    """A statement the keeper holds is not on the server (pg_stat_activity) until it is let go."""
    _, keeper, dsn = gate
    assert servers.pg is not None
    conn = await asyncpg.connect(dsn)
    observer = await asyncpg.connect(servers.pg.dsn)
    try:
        keeper.hold = True
        update = asyncio.create_task(conn.execute("UPDATE t SET v = 7 WHERE id = 1"))
        session, group = await keeper.arrived.get()
        assert group.shown() == "UPDATE t SET v = 7 WHERE id = 1"
        query = "SELECT state, query FROM pg_stat_activity WHERE pid = $1"
        row = await observer.fetchrow(query, session.pid)
        assert row is not None
        assert row["state"] == "idle" and "UPDATE" not in row["query"]  # held at the gate
        assert not update.done()
        keeper.hold = False
        keeper.go.set()
        assert await update == "UPDATE 1"
        assert await conn.fetchval("SELECT v FROM t WHERE id = 1") == 7
    finally:
        keeper.hold = False
        keeper.go.set()
        await conn.close()
        await observer.close()


async def test_a_prepare_is_not_a_step_and_a_named_statement_keeps_its_text(
    gate: tuple[Gate, Keeper, str],
) -> None:
    """A Parse/Describe group runs nothing, so is no step; a named statement shows its SQL."""
    _, keeper, dsn = gate
    async with connected(dsn) as conn:
        before = len(keeper.steps)
        stmt = await conn.prepare("SELECT v FROM t WHERE id = $1")
        assert len(keeper.steps) == before  # Parse/Describe/Sync runs nothing
        assert keeper.betweens  # ... and the keeper heard it go
        assert await stmt.fetchval(1) == 0
        assert await stmt.fetchval(1) == 0
    assert [t for _, t in keeper.steps[before:]] == ["SELECT v FROM t WHERE id = $1  -- ('1')"] * 2


async def test_a_drivers_own_at_connect_is_no_step_and_later_ones_are(
    gate: tuple[Gate, Keeper, str],
) -> None:
    """SETs, a SHOW and a select of version() before a session's first step (pgjdbc's two
    SETs, SQLAlchemy's reads) go on their own; after it, a SET or a SHOW is a step like any
    statement."""
    _, keeper, dsn = gate
    async with connected(dsn) as conn:
        before = len(keeper.steps)
        await conn.execute("SET extra_float_digits = 3")
        await conn.execute("SET application_name = 'PostgreSQL JDBC Driver'")
        assert await conn.fetchval("SHOW application_name") == "PostgreSQL JDBC Driver"
        assert "PostgreSQL" in await conn.fetchval("select pg_catalog.version()")
        assert len(keeper.steps) == before and keeper.betweens[-2:] == ["s1", "s1"]
        assert await conn.fetchval("SELECT v FROM t WHERE id = 1") == 0
        await conn.execute("SET lock_timeout = '1s'")
        assert await conn.fetchval("SHOW lock_timeout") == "1s"
    shown = [t for _, t in keeper.steps[before:]]
    assert shown == ["SELECT v FROM t WHERE id = 1", "SET lock_timeout = '1s'", "SHOW lock_timeout"]


def test_only_sets_out_of_a_transaction_before_the_first_step_are_the_drivers() -> None:
    """A group of SETs alone, idle, before any step is the driver's; anything else is not."""
    fresh = Session(1, ("127.0.0.1", 1), {})

    def group(*sql: str) -> Group:
        return Group(statements=[Statement(s) for s in sql])

    assert fresh.driver_setup(group("SET extra_float_digits = 3", "set TimeZone='UTC';"))
    assert not fresh.driver_setup(group("SET a = 1; UPDATE t SET v = 1"))
    assert not fresh.driver_setup(group("BEGIN", "SET LOCAL lock_timeout = '1s'"))
    assert not fresh.driver_setup(group())  # a Parse/Describe: no step anyway
    begun = Session(2, ("127.0.0.1", 1), {}, status="T")
    assert not begun.driver_setup(group("SET lock_timeout = '1s'"))
    begun.status, begun.began = "I", True
    assert not begun.driver_setup(group("SET lock_timeout = '1s'"))


SESSION_LOCAL = [  # each alone, idle, before any step: the driver's own
    "select pg_catalog.version()",
    "select current_schema()",
    "SELECT current_setting('server_version_num')",
    "select pg_catalog.current_setting('search_path', true) AS path",
    "show transaction isolation level",
    "show standard_conforming_strings",
    "SHOW ALL",
    "SELECT CAST('test plain returns' AS VARCHAR(60)) AS anon_1",
    "SELECT 1; ",
    "select 'x'::text AS a, $1::integer",
]
SHARED = [  # each a step: it may touch what another session sees, or be touched by it
    "SELECT pg_advisory_lock(1)",
    "select pg_try_advisory_xact_lock(1, 2)",
    "SELECT nextval('orders_id_seq')",
    "SELECT setval('orders_id_seq', 1)",
    "select set_config('search_path', 'x', false)",
    "SELECT txid_current()",
    "SELECT now()",  # harmless, but not on the list
    "select pg_catalog.version() FROM t",
    "SELECT 1 FROM accounts",
    "SELECT balance FROM accounts WHERE id = 1",
    "SELECT 1 WHERE EXISTS (SELECT 1 FROM t)",
    "SELECT current_setting((SELECT name FROM t))",
    "SELECT CAST('t' AS regclass)",
    "SELECT 'a' AS x INTO copied",
    "UPDATE accounts SET balance = 0",
    "SELECT version(); UPDATE t SET v = 1",
    "SHOW lock_timeout; DROP TABLE t",
]


def test_only_statements_that_touch_nothing_shared_are_the_drivers_at_connect() -> None:
    """SQLAlchemy's reads at connect (version(), current_schema(), SHOWs, a constant cast)
    are the driver's own when each runs idle before any step; an advisory lock, nextval(),
    a FROM or a write stays a step, as does a SELECT in a transaction (it may fix a
    REPEATABLE READ snapshot) or in a group that ends at a Flush (its implicit transaction
    goes on)."""
    fresh = Session(1, ("127.0.0.1", 1), {})
    for sql in SESSION_LOCAL:
        assert fresh.driver_setup(Group(statements=[Statement(sql)])), sql
    for sql in SHARED:
        assert not fresh.driver_setup(Group(statements=[Statement(sql)])), sql
    version = [Statement("select pg_catalog.version()")]
    flush, sync = bytes([wire.FLUSH, 0, 0, 0, 4]), bytes([wire.SYNC, 0, 0, 0, 4])
    assert fresh.driver_setup(Group([sync], version))
    assert not fresh.driver_setup(Group([flush], version))
    assert fresh.driver_setup(Group([flush], [Statement("SHOW search_path")]))
    begun = Session(2, ("127.0.0.1", 1), {}, status="T")
    assert not begun.driver_setup(Group(statements=version))
    begun.status, begun.began = "I", True
    assert not begun.driver_setup(Group(statements=[Statement("SHOW search_path")]))


def test_an_empty_query_is_shown_as_one() -> None:
    """An empty query (psycopg_pool checks each connection it hands out with one) is a
    step like any other; the log and the transcripts name it instead of a blank."""
    assert Group(statements=[Statement("")]).shown() == "<empty query>"
    assert Statement(" \n").shown() == "<empty query>" and Statement("").inlined() == ""
    assert Statement("SELECT 1").shown() == "SELECT 1"


async def test_a_cancel_request_reaches_the_real_backend(gate: tuple[Gate, Keeper, str]) -> None:
    """A driver's CancelRequest through the gate ends the statement on the real backend."""
    _, _, dsn = gate
    async with connected(dsn) as conn:
        with pytest.raises(TimeoutError):
            await conn.execute("SELECT pg_sleep(60)", timeout=0.3)
        # asyncpg sent a CancelRequest on a new connection; only the server can end the
        # sleep, and the session answers again at once
        assert await conn.fetchval("SELECT 1", timeout=10) == 1


@pytest.mark.skipif(PSQL is None, reason="psql is not installed")
async def test_psql_goes_on_in_plain_text_and_require_gets_one_line(
    gate: tuple[Gate, Keeper, str], servers: Servers
) -> None:
    """psql's SSLRequest gets 'N': prefer goes on in plain text, require fails; no password
    is logged."""
    g, keeper, dsn = gate
    assert servers.pg is not None and PSQL is not None

    def psql(sslmode: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PGSSLMODE": sslmode, "PGCONNECT_TIMEOUT": "10"}
        command = [PSQL, "-X", "-At", "-v", "ON_ERROR_STOP=1", dsn, "-c", "SELECT 6 * 7"]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    done = await asyncio.to_thread(psql, "prefer")
    assert (done.returncode, done.stdout.strip()) == (0, "42"), done.stderr
    assert ("s1", "SELECT 6 * 7") in keeper.steps
    refused = await asyncio.to_thread(psql, "require")
    assert refused.returncode != 0 and "SSL" in refused.stderr
    password = servers.pg.dsn.split(":", 2)[2].split("@")[0]
    assert password not in g.log_text.getvalue()  # type: ignore[attr-defined]


async def test_the_gate_command_serves_logs_and_stops_on_sigterm(
    servers: Servers, database: str, tmp_path: Path
) -> None:
    """`locklab gate` prints what a client needs (the password only in a 0600 PGPASSFILE),
    logs each session's statements, and a SIGTERM ends it in one line, its folder gone."""
    assert servers.pg is not None
    log = tmp_path / "gate.log"
    command = [sys.executable, "-m", "lab.cli", "gate", "--pg-dsn", servers.pg.dsn]
    proc = await asyncio.create_subprocess_exec(
        *command, "--log", str(log), stdout=PIPE, stderr=PIPE
    )
    try:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 60)).decode() for _ in range(3)]
        assert lines[0].startswith("gate: 127.0.0.1:"), lines
        exported = dict(word.split("=", 1) for word in lines[2].split()[1:])
        passfile = Path(exported["PGPASSFILE"])
        assert os.stat(passfile).st_mode & 0o077 == 0
        password = servers.pg.dsn.split(":", 2)[2].split("@")[0]
        assert password not in "".join(lines)
        conn = await asyncpg.connect(
            host=exported["PGHOST"],
            port=int(exported["PGPORT"]),
            user=exported["PGUSER"],
            database=database,
            passfile=str(passfile),
        )
        assert await conn.fetchval("SELECT v FROM t WHERE id = $1", 1) == 0
        await conn.close()
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130
    assert err.decode().count("\n") == 1 and err.startswith(b"locklab: interrupted")
    assert not passfile.parent.exists()
    text = log.read_text()
    assert "s1 SELECT v FROM t WHERE id = $1  -- ('1')\n" in text and password not in text


def test_an_actors_failure_is_the_line_that_says_why() -> None:
    """The line shown for an actor that exited non-zero: psql's ERROR, an exception at the
    start of a line (Python's last traceback line, Node's before its stack and banner),
    else the last line."""
    node = "loader:1228\n  throw err;\nError: Cannot find module 'x.js'\n    at f (y.js:1)\n}\n\nNode.js v20"
    python = "Traceback (most recent call last):\n  x\nKeyError: 1\n\nDuring...\nValueError: bad"
    cases = {1: node, 2: python, 3: "psql:a.sql:3: ERROR:  deadlock detected", 4: "lost\nbye"}
    run = OrderRun(exits={n: 1 for n in cases}, output=cases)
    console = Console(record=True, width=200)
    print_order(console, Order(run, False, "True"), [Actor(n, f"a{n}") for n in cases])
    said = [line for line in console.export_text().splitlines() if " exited 1: " in line]
    assert said == [
        "a1 exited 1: Error: Cannot find module 'x.js'",
        "a2 exited 1: ValueError: bad",
        "a3 exited 1: psql:a.sql:3: ERROR:  deadlock detected",
        "a4 exited 1: bye",
    ]
