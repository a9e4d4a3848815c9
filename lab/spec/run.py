"""Run a spec's permutations the way PostgreSQL's isolation tester does, printing what it
prints (its src/test/isolation/isolationtester.c is the model; this is the lab's own code),
on the lab's one ordering engine, lab/pinned/sequencer.py.

One connection per session plus a control connection, all on a database made for the
spec and dropped after it. For each permutation: the setup blocks on the control
connection, each session's setup on its own; then the permutation is the sequencer's
schedule. Each session's code sends a step's whole text as one simple query when it is
granted, and keeps what the server sends back as it comes. A step is *blocked* when the
server says its backend is (``pg_isolation_test_session_is_blocked`` over the spec's
sessions, asked on the control connection); the sequencer grants the next step once every
session has ended its step, asked for its next or is blocked. A step due on a session
still blocked waits for it (the tester since PostgreSQL 14 prints no "invalid permutation
detected"), as do the steps still blocked at the end. A step that neither ends nor blocks
within the tester's limit (that version's: `step_wait_s`) is cancelled and reported as the
tester does; at twice the limit the run ends, exit code 1, as the tester exits.

What is printed comes from what the sessions kept (lab/spec/session.py), parsed by the
tester's own loop (lab/spec/tester.py), told of each item by the sequencer: the step just
granted, then the waiting steps in launch order, ``<... completed>`` once a step's answer
is in. What a session kept is parsed as libpq would have read it then: the step just
sent as its answer came, a waiting step all at once when the tester looks at it again,
so notices land where the tester prints them. ``(*)`` prints ``<waiting ...>`` at once; ``(s2a)`` holds a step's
completion until s2a has completed, ``(s2a notices N)`` until s2a's session has sent N more
notices.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lab.core.steps import Backend
from lab.errors import LabError
from lab.pinned.cast import Code
from lab.pinned.rules import Rules
from lab.pinned.sequencer import Sequencer
from lab.spec.databases import Databases
from lab.spec.parse import Blocker, PermutationStep, Spec, read_spec
from lab.spec.printout import result_table
from lab.spec.session import Exit, KeptConn, SessionHandle, SpecConn, SpecStep, error_text
from lab.spec.tester import NoticePrinter, Tester
from lab.spec.wire import PgConn, Result

DEFAULT_STEP_WAIT_S = 360.0  # the tester's max_step_wait
STOP_LOOK_S = 0.05  # how often a suite's lane looks whether it was asked to stop


class Stopped(LabError):
    """The run was asked to stop (Ctrl-C in a suite): its connections close, its database
    goes."""


@dataclass
class SpecRun:
    """One spec's run: its connections and everything printed, in the order printed."""

    spec: Spec
    conns: list[SpecConn] = field(default_factory=list)  # [0] is the control connection
    out: list[str] = field(default_factory=list)
    step_wait_s: float = DEFAULT_STEP_WAIT_S  # set at connect, as the server's tester sets it
    wait_given: float | None = None  # a caller's limit instead
    new_notice: bool = False
    pids: str = ""  # the sessions' backends, as pg_isolation_test_session_is_blocked takes them
    targets: dict[int, int] = field(default_factory=dict)  # id(blocker) -> notices awaited
    startup: Mapping[str, str] = field(default_factory=dict)  # each connection's startup
    stop: threading.Event | None = None  # set: the run ends at its next look
    gave_up: tuple[int, str] | None = None  # where the tester gave up on a step: (line, what)

    def check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Stopped("stopped")

    def emit(self, text: str) -> None:
        self.out.append(text)

    def connect(self, dsn: str, database: str) -> None:
        """The control connection and one per session, each with "/<session>" appended to
        its application_name, as the tester names them."""
        pg = PgConn(dsn, database=database, startup=self.startup)
        self.conns.append(SpecConn("control connection", pg))
        for sess in self.spec.sessions:
            conn = SpecConn(sess.name, KeptConn(dsn, database=database, startup=self.startup))
            conn.pg.notice = NoticePrinter(self, conn)
            conn.kept().say = self.emit
            self.conns.append(conn)
        for conn in self.conns:
            name = conn.name.replace("'", "''")
            conn.pg.execute(
                "SELECT set_config('application_name',"
                f" current_setting('application_name') || '/' || '{name}', false)"
            )
        self.pids = ",".join(str(c.pg.pid) for c in self.conns[1:])
        major = server_major(self.conns[0].pg)
        self.step_wait_s = step_wait_s(major) if self.wait_given is None else self.wait_given

    def close(self) -> None:
        for c in self.conns:
            c.pg.close()

    def conn_of(self, ps: PermutationStep) -> SpecConn:
        return self.conns[1 + self.spec.step(ps.name).session]

    def blocker_conn(self, b: Blocker) -> SpecConn:
        return self.conns[1 + self.spec.step(b.step).session]

    def print_result(self, res: Result) -> None:
        if res.kind == "tuples":
            self.emit(result_table(res))
        elif res.kind == "error":
            sev, msg = res.fields.get("S"), res.fields.get("M")
            self.emit(f"{sev}:  {msg}\n" if sev and msg else res.message() + "\n")

    def run_sql(self, conn: SpecConn, sql: str, failed: str, fatal: bool) -> None:
        res = conn.pg.execute(sql)
        if res is not None and res.kind == "tuples":
            self.emit(result_table(res))
        elif res is None or res.kind != "command":
            self.emit(f"{failed}: {error_text(res)}")
            if fatal:
                raise Exit

    async def blocked(self, pid: int) -> bool:
        """The tester's own question, on the control connection."""
        ask = f"SELECT pg_catalog.pg_isolation_test_session_is_blocked({pid}, '{{{self.pids}}}')"
        res = await self.conns[0].pg.aexecute(ask)
        if res is None or res.kind != "tuples" or len(res.rows) != 1:
            self.emit(f"lock wait query failed: {error_text(res)}")
            raise Exit
        return res.rows[0][0] == "t"

    async def permutation(self, perm: list[PermutationStep]) -> None:
        self.check_stop()
        self.emit("\nstarting permutation:" + "".join(f" {ps.name}" for ps in perm) + "\n")
        for sql in self.spec.setups:
            self.run_sql(self.conns[0], sql, "setup failed", fatal=True)
        for conn, sess in zip(self.conns[1:], self.spec.sessions, strict=True):
            if sess.setup is not None:
                self.run_sql(conn, sess.setup, f"setup of session {sess.name} failed", fatal=True)
        items = [SpecStep(ps, self.conn_of(ps)) for ps in perm]
        tester = Tester(self, items)
        sessions: dict[str, tuple[Backend | None, Code]] = {}
        for conn in self.conns[1:]:  # by the spec's own session names
            mine = [step for step in items if step.conn is conn]
            sessions[conn.name] = (SessionHandle(conn.pg), tester.code(conn, mine))
        schedule = [f"{step.conn.name} {step.ps.name}" for step in items]
        seq = Sequencer(
            None,
            sessions,
            label=f"{self.spec.sessions[0].name}.. trace",
            rules=Rules(
                timeout=self.step_wait_s,
                resolve_timeout=self.step_wait_s,
                persist=True,
                wait_blocked=True,
            ),
            overdue=tester.overdue,
            watch=tester,
        )
        for conn in self.conns[1:]:
            conn.kept().live = False
        try:
            await seq.run(schedule)
        finally:
            for conn in self.conns[1:]:
                conn.kept().go_live()
        for conn, sess in zip(self.conns[1:], self.spec.sessions, strict=True):
            if sess.teardown is not None:
                failed = f"teardown of session {sess.name} failed"
                self.run_sql(conn, sess.teardown, failed, fatal=False)
        if self.spec.teardown is not None:
            self.run_sql(self.conns[0], self.spec.teardown, "teardown failed", fatal=False)

    async def run(self) -> None:
        """Every permutation; when `stop` is set (a suite's Ctrl-C), the one running ends
        at once, mid-step too: Stopped."""
        main = asyncio.current_task()
        assert main is not None

        async def watch_stop() -> None:
            # `stop` is a threading.Event the suite sets from its own thread: looked at
            while self.stop is not None and not self.stop.is_set():  # noqa: ASYNC110
                await asyncio.sleep(STOP_LOOK_S)
            main.cancel()

        watcher = asyncio.create_task(watch_stop()) if self.stop is not None else None
        try:
            for perm in self.spec.permutations or all_permutations(self.spec):
                await self.permutation(perm)
        except asyncio.CancelledError:
            if self.stop is not None and self.stop.is_set():
                raise Stopped("stopped") from None
            raise
        finally:
            if watcher is not None:
                watcher.cancel()


def all_permutations(spec: Spec) -> list[list[PermutationStep]]:
    """Every interleaving of the sessions' steps, in the tester's order (take the next step
    of the first session that has one left, then recurse; then the next session...)."""
    out: list[list[PermutationStep]] = []
    piles = [0] * len(spec.sessions)

    def recurse(done: list[PermutationStep]) -> None:
        found = False
        for i, sess in enumerate(spec.sessions):
            if piles[i] < len(sess.steps):
                st = sess.steps[piles[i]]
                piles[i] += 1
                recurse([*done, PermutationStep(st.name, st.line)])
                piles[i] -= 1
                found = True
        if not found:
            out.append(done)

    recurse([])
    return out


def step_wait_s(major: int = 17) -> float:
    """The tester's limit, as the isolationtester of PostgreSQL `major` sets it: 16 and
    later, twice PG_TEST_TIMEOUT_DEFAULT when set, else 360 s; 15 and earlier,
    PGISOLATIONTIMEOUT when set, else 300 s."""
    if major <= 15:
        env, default, factor = os.environ.get("PGISOLATIONTIMEOUT"), 300.0, 1.0
    else:
        env, default, factor = os.environ.get("PG_TEST_TIMEOUT_DEFAULT"), 360.0, 2.0
    return factor * int(env) if env and env.strip().lstrip("-").isdigit() else default


def server_major(conn: PgConn) -> int:
    """The server's major version, from what it reported at login (17 if it did not)."""
    version = conn.server.get("server_version", "17")
    head = version.split(".")[0].split()[0]
    return int(head) if head.isdigit() else 17


def run_spec_report(
    spec: Spec,
    dsn: str,
    wait_s: float | None = None,
    *,
    database: str | None = None,
    startup: Mapping[str, str] | None = None,
    stop: threading.Event | None = None,
) -> tuple[str, int, tuple[int, str] | None]:
    """`run_spec`, and where the tester gave up on a step, if it did: (its line, what).

    Run every permutation of `spec` through `dsn`: the text the isolation tester prints
    (stdout and stderr, in order) and its exit code (1 where it gives up: a step past twice
    the limit, mutually blocked steps, a failed setup). On `database` when given (a suite's
    lane: made and dropped by its caller), else on a database of its own, dropped after.
    `startup`: parameters every connection sends at login (application_name, TimeZone...)."""
    run = SpecRun(spec)
    run.wait_given = wait_s
    run.startup, run.stop = dict(startup or {}), stop
    run.out += spec.warnings
    run.emit(f"Parsed test spec with {len(spec.sessions)} sessions\n")
    if database is not None:
        code = _run_on(run, dsn, database)
        return "".join(run.out), code, run.gave_up
    dbs = Databases(dsn)
    try:
        code = _run_on(run, dsn, dbs.make(f"locklab_spec_{secrets.token_hex(4)}"))
    finally:
        dbs.close()
    return "".join(run.out), code, run.gave_up


def run_spec(spec: Spec, dsn: str, wait_s: float | None = None) -> tuple[str, int]:
    """What the isolation tester prints for `spec` on a database of its own, and its exit
    code (run_spec_report says more, and runs on a given database)."""
    text, code, _ = run_spec_report(spec, dsn, wait_s)
    return text, code


def _run_on(run: SpecRun, dsn: str, database: str) -> int:
    try:
        run.connect(dsn, database)
        asyncio.run(run.run())
        return 0
    except Exit:
        return 1
    finally:
        run.close()


def trace_spec(path: Path, dsn: str) -> tuple[str, int]:
    """What ``locklab trace FILE.spec`` prints and its exit code: the spec at `path` parsed
    (a bad spec raises `SpecError`, a LabError of one line ``FILE:LINE: what``: exit 2)
    and run on the PostgreSQL at `dsn` exactly as the isolation tester runs it."""
    return run_spec(read_spec(path), dsn)
