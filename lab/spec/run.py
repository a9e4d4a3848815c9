"""Run a spec's permutations the way PostgreSQL's isolation tester does, printing what it
prints (its src/test/isolation/isolationtester.c is the model; this is the lab's own code).

One connection per session plus a control connection, all on a database made for the
spec and dropped after it. For each permutation: the setup blocks on the control
connection, each session's setup on its own; then each step is sent without waiting for
it. A step is *waiting* when the server says its backend is blocked
(``pg_isolation_test_session_is_blocked`` over the spec's sessions, asked on the control
connection after each 10 ms without an answer), and is then polled again after every
later step, in launch order, ``<... completed>`` when it ends. A step whose session is
still running an earlier one waits for it first. ``(*)`` prints ``<waiting ...>`` at once;
``(s2a)`` holds a step's completion until s2a has completed, ``(s2a notices N)`` until
s2a's session has sent N more notices. A step running longer than the tester's limit
(that version's: `step_wait_s`) is cancelled and reported as the tester
does; at twice the limit the run ends, exit code 1, as the tester exits. (The tester of
PostgreSQL 14 and later prints no "invalid permutation detected": a step due on a session
still waiting waits for it, and so does this runner.)

`locklab explore FILE.spec` runs a spec's permutations on the lab's ordering engine
(lab/pinned/sequencer.py, via lab/spec/explore.py). `trace` must print the tester's text
byte for byte: results in text format and notices where the tester reads them, in its
order of completions, so this runner keeps the tester's loop on its own small libpq.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lab.errors import LabError
from lab.spec.databases import Databases
from lab.spec.parse import Blocker, PermutationStep, Spec, read_spec
from lab.spec.printout import result_table
from lab.spec.wire import NO_CONNECTION, PgConn, Result

DEFAULT_STEP_WAIT_S = 360.0  # the tester's max_step_wait
POLL_S = 0.010  # the tester looks for a lock wait after each 10 ms without an answer
NONBLOCK, RETRY = 1, 2  # try_complete_step's flags


class _Exit(Exception):
    """Where the tester calls exit(1): the run ends, what was printed stays."""


class Stopped(LabError):
    """The run was asked to stop (Ctrl-C in a suite): its connections close, its database
    goes."""


@dataclass
class _Conn:
    name: str
    pg: PgConn
    active: PermutationStep | None = None
    notices: int = 0


@dataclass
class SpecRun:
    """One spec's run: its connections and everything printed, in the order printed."""

    spec: Spec
    conns: list[_Conn] = field(default_factory=list)  # [0] is the control connection
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
        self.conns.append(_Conn("control connection", pg))
        for sess in self.spec.sessions:
            conn = _Conn(sess.name, PgConn(dsn, database=database, startup=self.startup))
            conn.pg.notice = _NoticePrinter(self, conn)
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

    # --- the tester's loop ---

    def conn_of(self, ps: PermutationStep) -> _Conn:
        return self.conns[1 + self.spec.step(ps.name).session]

    def is_blocked(self, conn: _Conn) -> bool:
        ask = f"SELECT pg_catalog.pg_isolation_test_session_is_blocked({conn.pg.pid}, "
        res = self.conns[0].pg.execute(ask + f"'{{{self.pids}}}')")
        if res is None or res.kind != "tuples" or len(res.rows) != 1:
            self.emit(f"lock wait query failed: {_error(res)}")
            raise _Exit
        return res.rows[0][0] == "t"

    def has_blocker(self, ps: PermutationStep) -> bool:
        for b in ps.blockers:
            if b.kind == "once":
                continue
            other = self.conns[1 + self.spec.step(b.step).session]
            if b.kind == "step" and other.active is not None and other.active.name == b.step:
                return True
            if b.kind == "notices" and other.notices < self.targets[id(b)]:
                return True
        return False

    def try_complete(self, ps: PermutationStep, flags: int) -> bool:
        """True while the step is not complete (waiting, or held by a blocker)."""
        step = self.spec.step(ps.name)
        conn = self.conns[1 + step.session]
        waiting_line = f"step {step.name}: {step.sql} <waiting ...>\n"
        if not flags & RETRY and any(b.kind == "once" for b in ps.blockers):
            self.emit(waiting_line)
            return True
        start, canceled = time.monotonic(), False
        while conn.pg.is_busy():
            if conn.pg.read(POLL_S):
                continue
            self.check_stop()
            if flags & NONBLOCK and self.is_blocked(conn):
                conn.pg.read(0)
                if not conn.pg.is_busy():
                    break
                if not flags & RETRY:
                    self.emit(waiting_line)
                return True
            waited = time.monotonic() - start
            if waited > self.step_wait_s and not canceled:
                conn.pg.cancel()
                self.emit(
                    f"isolationtester: canceling step {step.name} after {int(waited)} seconds\n"
                )
                canceled = True
            if waited > 2 * self.step_wait_s:
                self.emit(f"step {step.name} timed out after {int(waited)} seconds\n")
                self.gave_up = (ps.line, f"step {step.name} never returned ({int(waited)} s)")
                raise _Exit
        if self.has_blocker(ps):
            if not flags & RETRY:
                self.emit(waiting_line)
            return True
        self.emit(
            f"step {step.name}: <... completed>\n"
            if flags & RETRY
            else f"step {step.name}: {step.sql}\n"
        )
        while (res := conn.pg.get_result()) is not None:
            self.print_result(res)
        while conn.pg.read(0):
            pass
        conn.pg.parse()
        while conn.pg.notifies:
            n = conn.pg.notifies.popleft()
            sender = next((c.name for c in self.conns[1:] if c.pg.pid == n.pid), f"PID {n.pid}")
            self.emit(
                f'{conn.name}: NOTIFY "{n.channel}" with payload "{n.payload}" from {sender}\n'
            )
        conn.active = None
        return False

    def print_result(self, res: Result) -> None:
        if res.kind == "tuples":
            self.emit(result_table(res))
        elif res.kind == "error":
            sev, msg = res.fields.get("S"), res.fields.get("M")
            self.emit(f"{sev}:  {msg}\n" if sev and msg else res.message() + "\n")

    def try_complete_all(self, waiting: list[PermutationStep], flags: int) -> list[PermutationStep]:
        """Poll the waiting steps in order, dropping those that completed; again while a
        still-held step has a blocker and something completed or sent a notice."""
        while True:
            self.new_notice = False
            before, held, still = len(waiting), False, []
            for ps in waiting:
                if self.try_complete(ps, flags):
                    held = held or bool(ps.blockers)
                    still.append(ps)
            waiting = still
            if not (held and (len(waiting) < before or self.new_notice)):
                return waiting

    def run_sql(self, conn: _Conn, sql: str, failed: str, fatal: bool) -> None:
        res = conn.pg.execute(sql)
        if res is not None and res.kind == "tuples":
            self.emit(result_table(res))
        elif res is None or res.kind != "command":
            self.emit(f"{failed}: {_error(res)}")
            if fatal:
                raise _Exit

    def permutation(self, steps: list[PermutationStep]) -> None:
        self.check_stop()
        self.emit("\nstarting permutation:" + "".join(f" {ps.name}" for ps in steps) + "\n")
        for sql in self.spec.setups:
            self.run_sql(self.conns[0], sql, "setup failed", fatal=True)
        for conn, sess in zip(self.conns[1:], self.spec.sessions, strict=True):
            if sess.setup is not None:
                self.run_sql(conn, sess.setup, f"setup of session {sess.name} failed", fatal=True)
        waiting: list[PermutationStep] = []
        for ps in steps:
            conn = self.conn_of(ps)
            start = time.monotonic()
            while conn.active is not None:
                self.check_stop()
                old = conn.active
                if not self.try_complete(old, RETRY):
                    waiting.remove(old)
                waiting = self.try_complete_all(waiting, NONBLOCK | RETRY)
                waited = time.monotonic() - start
                if conn.active is not None and waited > 2 * self.step_wait_s:
                    active = "".join(f" {c.active.name}" for c in self.conns[1:] if c.active)
                    self.emit(f"step {conn.active.name} timed out after {int(waited)} seconds\n")
                    self.emit(f"active steps are:{active}\n")
                    what = f"step {conn.active.name} never returned ({int(waited)} s)"
                    self.gave_up = (conn.active.line, what)
                    raise _Exit
            if not conn.pg.send_query(self.spec.step(ps.name).sql):
                self.emit(f"failed to send query for step {ps.name}: {NO_CONNECTION}\n")
                raise _Exit
            conn.active = ps
            for b in ps.blockers:
                if b.kind == "notices":
                    self.targets[id(b)] = b.notices + self.blocker_conn(b).notices
            must_wait = self.try_complete(ps, NONBLOCK)
            waiting = self.try_complete_all(waiting, NONBLOCK | RETRY)
            if must_wait:
                waiting.append(ps)
        waiting = self.try_complete_all(waiting, RETRY)
        if waiting:
            self.emit("failed to complete permutation due to mutually-blocking steps\n")
            names = ", ".join(ps.name for ps in waiting)
            self.gave_up = (waiting[0].line, f"steps {names} block each other and never return")
            raise _Exit
        for conn, sess in zip(self.conns[1:], self.spec.sessions, strict=True):
            if sess.teardown is not None:
                failed = f"teardown of session {sess.name} failed"
                self.run_sql(conn, sess.teardown, failed, fatal=False)
        if self.spec.teardown is not None:
            self.run_sql(self.conns[0], self.spec.teardown, "teardown failed", fatal=False)

    def blocker_conn(self, b: Blocker) -> _Conn:
        return self.conns[1 + self.spec.step(b.step).session]

    def run(self) -> None:
        for perm in self.spec.permutations or all_permutations(self.spec):
            self.permutation(perm)


class _NoticePrinter:
    """A session connection's notice processor: "s1: NOTICE:  text", counted."""

    def __init__(self, run: SpecRun, conn: _Conn) -> None:
        self.run, self.conn = run, conn

    def __call__(self, text: str) -> None:
        self.run.emit(f"{self.conn.name}: {text}")
        self.conn.notices += 1
        self.run.new_notice = True


def _error(res: Result | None) -> str:
    return res.message() if res is not None else ""


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
        run.run()
        return 0
    except _Exit:
        return 1
    finally:
        run.close()


def trace_spec(path: Path, dsn: str) -> tuple[str, int]:
    """What ``locklab trace FILE.spec`` prints and its exit code: the spec at `path` parsed
    (a bad spec raises `SpecError`, a LabError of one line ``FILE:LINE: what``: exit 2)
    and run on the PostgreSQL at `dsn` exactly as the isolation tester runs it."""
    return run_spec(read_spec(path), dsn)
