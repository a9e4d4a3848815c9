"""The isolation tester's own loop (src/test/isolation/isolationtester.c is the model; this
is the lab's own code): told of each schedule item by the sequencer with every session
settled, it parses what the sessions kept and prints what the tester prints: the step
just granted, the waiting steps in launch order, ``<... completed>`` once a step's answer
is in, a step cancelled past the tester's limit, a permutation given up."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Protocol

from lab.aio import within
from lab.core.steps import Session
from lab.pinned.cast import Code, SessionState
from lab.spec.parse import Blocker, PermutationStep, Spec
from lab.spec.session import Exit, SpecConn, SpecStep
from lab.spec.wire import NO_CONNECTION, Result

NONBLOCK, RETRY = 1, 2  # try_complete_step's flags
LOOK_S = 0.05  # a step held by a blocker: how often to look again for what may free it


class Printed(Protocol):
    """What the loop reads and writes of a spec's run (lab/spec/run.py SpecRun)."""

    spec: Spec
    conns: list[SpecConn]  # [0] is the control connection
    step_wait_s: float
    targets: dict[int, int]  # id(blocker) -> notices awaited
    gave_up: tuple[int, str] | None
    new_notice: bool

    def emit(self, text: str) -> None: ...

    def check_stop(self) -> None: ...

    async def blocked(self, pid: int) -> bool: ...

    def blocker_conn(self, b: Blocker) -> SpecConn: ...

    def print_result(self, res: Result) -> None: ...


class Tester:
    """The isolation tester's loop over what the sessions kept (`code`), told of each
    schedule item by the sequencer with every session settled (its Watch)."""

    def __init__(self, run: Printed, items: list[SpecStep]) -> None:
        self.run, self.items = run, items
        self.waiting: list[SpecStep] = []
        self.idle_since = time.monotonic()  # when the loop last printed
        self.changed = asyncio.Event()  # a session kept something

    def code(self, conn: SpecConn, mine: list[SpecStep]) -> Code:
        """A session's code: its steps of the permutation, each sent when granted."""
        pg = conn.kept()

        async def waits() -> bool:
            return await self.run.blocked(pg.pid)

        async def send(step: SpecStep) -> None:
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
                raise Exit
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
            raise Exit
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
            raise Exit

    async def overdue(self, states: Sequence[SessionState], n: int) -> None:
        """A step past the tester's limit (n = 1) is cancelled; past twice the limit the
        tester gives up."""
        run = self.run
        for st in states:
            conn = next(c for c in run.conns[1:] if c.name == st.session.name)
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
                raise Exit

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

    def try_complete(self, step: SpecStep, flags: int) -> bool:
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

    def try_complete_all(self, waiting: list[SpecStep], flags: int) -> list[SpecStep]:
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


class NoticePrinter:
    """A session connection's notice processor: "s1: NOTICE:  text", counted."""

    def __init__(self, run: Printed, conn: SpecConn) -> None:
        self.run, self.conn = run, conn

    def __call__(self, text: str) -> None:
        self.run.emit(f"{self.conn.name}: {text}")
        self.conn.notices += 1
        self.run.new_notice = True
