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

What is printed comes from what the sessions kept, parsed by the tester's own loop
(`_Tester`), told of each item by the sequencer: the step just granted, then the waiting
steps in launch order, ``<... completed>`` once a step's answer is in. What a session kept
is parsed as libpq would have read it then: the step just sent as its answer came, a
waiting step all at once when the tester looks at it again, so notices land where the
tester prints them. ``(*)`` prints ``<waiting ...>`` at once; ``(s2a)`` holds a step's
completion until s2a has completed, ``(s2a notices N)`` until s2a's session has sent N more
notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from lab.aio import within
from lab.core.steps import Session
from lab.errors import LabError
from lab.pinned.cast import Code, SessionState
from lab.pinned.sequencer import Rules, Sequencer
from lab.spec.databases import Databases
from lab.spec.parse import Blocker, PermutationStep, Spec, read_spec
from lab.spec.printout import result_table
from lab.spec.wire import NO_CONNECTION, PgConn, Result

DEFAULT_STEP_WAIT_S = 360.0  # the tester's max_step_wait
NONBLOCK, RETRY = 1, 2  # try_complete_step's flags
LOOK_S = 0.05  # a step held by a blocker: how often to look again for what may free it
STOP_LOOK_S = 0.05  # how often a suite's lane looks whether it was asked to stop


class _Exit(Exception):
    """Where the tester calls exit(1): the run ends, what was printed stays."""


class Stopped(LabError):
    """The run was asked to stop (Ctrl-C in a suite): its connections close, its database
    goes."""


class _Kept(PgConn):
    """A session's connection. During a permutation its code reads the socket as the
    server answers (`take`) and keeps each read; the tester's loop parses them when it
    looks (`read`: the reads kept up to `at_once` as one, later ones one by one, as the
    tester would have read them). Outside a permutation (`live`) it reads the socket."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.live = True  # before the login, which reads
        self.kept: deque[tuple[float, bytes | str]] = deque()  # (when, bytes or a line)
        self.at_once = 0.0
        self.say: Callable[[str], None] = lambda line: None  # a kept line of the tester's
        self.hung_up = False  # a read found the server gone
        self._scan = b""  # what `take` has not split into messages yet
        super().__init__(*args, **kwargs)

    async def take(self) -> bool:
        """One read of the server's answer, kept; True once ReadyForQuery came (or the
        server hung up)."""
        data = await self.recv()
        self.kept.append((time.monotonic(), data))
        if not data:
            self.hung_up = True
            return True
        self._scan += data
        ready = False
        while len(self._scan) >= 5:
            size = int.from_bytes(self._scan[1:5], "big")
            if len(self._scan) < size + 1:
                break
            ready = ready or self._scan[:1] == b"Z"
            self._scan = self._scan[size + 1 :]
        return ready

    def read(self, timeout: float | None) -> bool:
        if self.live:
            return super().read(timeout)
        if self.closed or not self.kept:
            return False
        when, item = self.kept.popleft()
        if isinstance(item, str):
            self.say(item)
            return True
        data = item  # and what came with it, as one recv would have read it
        while data and when <= self.at_once and self.kept:
            nxt, more = self.kept[0]
            if nxt > self.at_once or not isinstance(more, bytes) or not more:
                break  # the hang-up too is the next read's, as recv returns it
            self.kept.popleft()
            data += more
        self.feed(data)
        return True

    def go_live(self) -> None:
        """After a permutation: what was kept and not parsed comes first."""
        for _, item in self.kept:
            if isinstance(item, bytes) and not self.closed:
                self.feed(item)
        self.kept.clear()
        self.live = True


@dataclass
class _Conn:
    name: str
    pg: PgConn
    active: _Step | None = None  # sent, its completion not printed yet
    running: _Step | None = None  # the step its code is in, as the sequencer granted it
    notices: int = 0

    def kept(self) -> _Kept:
        """A session's connection (not the control connection's)."""
        return cast(_Kept, self.pg)


@dataclass
class _Step:
    """One item of a permutation: its session and what the session did with it."""

    ps: PermutationStep
    conn: _Conn
    sent: float = 0.0
    unsent: bool = False  # the connection was gone: nothing was sent
    done: bool = False  # the server's whole answer is kept
    done_at: float = 0.0


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
            conn = _Conn(sess.name, _Kept(dsn, database=database, startup=self.startup))
            conn.pg.notice = _NoticePrinter(self, conn)
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

    def conn_of(self, ps: PermutationStep) -> _Conn:
        return self.conns[1 + self.spec.step(ps.name).session]

    def blocker_conn(self, b: Blocker) -> _Conn:
        return self.conns[1 + self.spec.step(b.step).session]

    def print_result(self, res: Result) -> None:
        if res.kind == "tuples":
            self.emit(result_table(res))
        elif res.kind == "error":
            sev, msg = res.fields.get("S"), res.fields.get("M")
            self.emit(f"{sev}:  {msg}\n" if sev and msg else res.message() + "\n")

    def run_sql(self, conn: _Conn, sql: str, failed: str, fatal: bool) -> None:
        res = conn.pg.execute(sql)
        if res is not None and res.kind == "tuples":
            self.emit(result_table(res))
        elif res is None or res.kind != "command":
            self.emit(f"{failed}: {_error(res)}")
            if fatal:
                raise _Exit

    async def blocked(self, pid: int) -> bool:
        """The tester's own question, on the control connection."""
        ask = f"SELECT pg_catalog.pg_isolation_test_session_is_blocked({pid}, '{{{self.pids}}}')"
        res = await self.conns[0].pg.aexecute(ask)
        if res is None or res.kind != "tuples" or len(res.rows) != 1:
            self.emit(f"lock wait query failed: {_error(res)}")
            raise _Exit
        return res.rows[0][0] == "t"

    async def permutation(self, perm: list[PermutationStep]) -> None:
        self.check_stop()
        self.emit("\nstarting permutation:" + "".join(f" {ps.name}" for ps in perm) + "\n")
        for sql in self.spec.setups:
            self.run_sql(self.conns[0], sql, "setup failed", fatal=True)
        for conn, sess in zip(self.conns[1:], self.spec.sessions, strict=True):
            if sess.setup is not None:
                self.run_sql(conn, sess.setup, f"setup of session {sess.name} failed", fatal=True)
        items = [_Step(ps, self.conn_of(ps)) for ps in perm]
        tester = _Tester(self, items)
        sessions: dict[str, tuple[Any, Code]] = {}
        for i, conn in enumerate(self.conns[1:]):
            mine = [step for step in items if step.conn is conn]
            sessions[str(i)] = (cast(Any, _Handle(conn.pg)), tester.code(conn, mine))
        schedule = [f"{self.conns.index(step.conn) - 1} {step.ps.name}" for step in items]
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


class _Handle:
    """What the sequencer asks of a session's connection: its backend, and to drop it."""

    def __init__(self, pg: PgConn) -> None:
        self.pg = pg

    def get_server_pid(self) -> int:
        return self.pg.pid

    def terminate(self) -> None:
        self.pg.close()


class _Tester:
    """The isolation tester's loop over what the sessions kept (`code`), told of each
    schedule item by the sequencer with every session settled (its Watch)."""

    def __init__(self, run: SpecRun, items: list[_Step]) -> None:
        self.run, self.items = run, items
        self.waiting: list[_Step] = []
        self.idle_since = time.monotonic()  # when the loop last printed
        self.changed = asyncio.Event()  # a session kept something

    def code(self, conn: _Conn, mine: list[_Step]) -> Code:
        """A session's code: its steps of the permutation, each sent when granted."""
        pg = conn.kept()

        async def waits() -> bool:
            return await self.run.blocked(pg.pid)

        async def send(step: _Step) -> None:
            conn.running = step
            step.sent = time.monotonic()
            sql = self.run.spec.step(step.ps.name).sql
            if pg.hung_up or not pg.send_query(sql):
                step.unsent = True
            else:
                while not await pg.take():
                    self.changed.set()
            step.done, step.done_at = True, time.monotonic()
            self.changed.set()

        async def session_code(s: Session) -> str:
            for step in mine:
                await s.step(step.ps.name, send, step, waits=waits)
            return "done"

        return session_code

    # --- the sequencer's Watch ---

    async def due(self, k: int, session: str) -> None:
        """Before the tester sends item k: the step its session still runs (or holds back)
        completes first, then the waiting steps."""
        run = self.run
        run.check_stop()
        conn, start = self.items[k].conn, time.monotonic()
        while conn.active is not None:
            old = conn.active
            old.conn.kept().at_once = self.idle_since  # what came before the tester looked again
            if not self.try_complete(old, RETRY):
                self.waiting.remove(old)
            self.waiting = self.try_complete_all(self.waiting, NONBLOCK | RETRY)
            waited = time.monotonic() - start
            if conn.active is not None and waited > 2 * run.step_wait_s:
                active = "".join(f" {c.active.ps.name}" for c in run.conns[1:] if c.active)
                run.emit(f"step {conn.active.ps.name} timed out after {int(waited)} seconds\n")
                run.emit(f"active steps are:{active}\n")
                what = f"step {conn.active.ps.name} never returned ({int(waited)} s)"
                run.gave_up = (conn.active.ps.line, what)
                raise _Exit
            if conn.active is not None:  # held by a blocker: only the server frees it now
                self.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await within(self.changed.wait(), LOOK_S)
        self.idle_since = time.monotonic()

    async def granted(self, k: int, session: str) -> None:
        run, step = self.run, self.items[k]
        run.check_stop()
        if step.unsent:
            run.emit(f"failed to send query for step {step.ps.name}: {NO_CONNECTION}\n")
            raise _Exit
        step.conn.active = step
        for b in step.ps.blockers:
            if b.kind == "notices":
                run.targets[id(b)] = b.notices + run.blocker_conn(b).notices
        step.conn.kept().at_once = 0.0  # the step just sent: read as it came
        must_wait = self.try_complete(step, NONBLOCK)
        self.waiting = self.try_complete_all(self.waiting, NONBLOCK | RETRY)
        if must_wait:
            self.waiting.append(step)
        self.idle_since = time.monotonic()

    async def ended(self) -> None:
        self.waiting = self.try_complete_all(self.waiting, RETRY)
        if self.waiting:
            self.run.emit("failed to complete permutation due to mutually-blocking steps\n")
            names = ", ".join(step.ps.name for step in self.waiting)
            first = self.waiting[0].ps.line
            self.run.gave_up = (first, f"steps {names} block each other and never return")
            raise _Exit

    async def overdue(self, states: Sequence[SessionState], n: int) -> None:
        """A step past the tester's limit (n = 1) is cancelled; past twice the limit the
        tester gives up."""
        run = self.run
        for st in states:
            conn = run.conns[1 + int(st.session.name)]
            step = conn.running
            assert step is not None  # it is in a step: the sequencer says so
            name, waited = step.ps.name, int(n * run.step_wait_s)
            if n == 1:
                conn.pg.cancel()
                line = f"isolationtester: canceling step {name} after {waited} seconds\n"
                conn.kept().kept.append((time.monotonic(), line))
            else:
                run.emit(f"step {name} timed out after {waited} seconds\n")
                run.gave_up = (step.ps.line, f"step {name} never returned ({waited} s)")
                raise _Exit

    # --- the tester's own loop ---

    def has_blocker(self, ps: PermutationStep) -> bool:
        run = self.run
        for b in ps.blockers:
            if b.kind == "once":
                continue
            other = run.blocker_conn(b)
            if b.kind == "step" and other.active is not None and other.active.ps.name == b.step:
                return True
            if b.kind == "notices" and other.notices < run.targets[id(b)]:
                return True
        return False

    def try_complete(self, step: _Step, flags: int) -> bool:
        """True while the step is not complete (waiting, or held by a blocker)."""
        run = self.run
        sdef = run.spec.step(step.ps.name)
        pg = step.conn.kept()
        waiting_line = f"step {sdef.name}: {sdef.sql} <waiting ...>\n"
        if not flags & RETRY and any(b.kind == "once" for b in step.ps.blockers):
            run.emit(waiting_line)
            return True
        while pg.is_busy() and pg.read(0):
            pass
        if pg.is_busy() or not step.done or self.has_blocker(step.ps):
            if not flags & RETRY:
                run.emit(waiting_line)
            return True
        run.emit(
            f"step {sdef.name}: <... completed>\n"
            if flags & RETRY
            else f"step {sdef.name}: {sdef.sql}\n"
        )
        while (res := pg.get_result()) is not None:
            run.print_result(res)
        while pg.read(0):
            pass
        pg.parse()
        while pg.notifies:
            n = pg.notifies.popleft()
            sender = next((c.name for c in run.conns[1:] if c.pg.pid == n.pid), f"PID {n.pid}")
            run.emit(
                f'{step.conn.name}: NOTIFY "{n.channel}" with payload "{n.payload}" from {sender}\n'
            )
        step.conn.active = None
        return False

    def try_complete_all(self, waiting: list[_Step], flags: int) -> list[_Step]:
        """Poll the waiting steps in order, dropping those that completed; again while a
        still-held step has a blocker and something completed or sent a notice."""
        while True:
            self.run.new_notice = False
            before, held, still = len(waiting), False, []
            since = self.idle_since
            for step in waiting:
                # in a pass, what a waiting step's session sent is read at once; at the end
                # the tester waits for each in turn, reading as it comes
                step.conn.kept().at_once = time.monotonic() if flags & NONBLOCK else since
                if self.try_complete(step, flags):
                    held = held or bool(step.ps.blockers)
                    still.append(step)
                else:
                    since = max(since, step.done_at)
            waiting = still
            if not (held and (len(waiting) < before or self.run.new_notice)):
                return waiting


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
        asyncio.run(run.run())
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
