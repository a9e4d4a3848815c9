"""The sessions a Sequencer (lab/pinned/sequencer.py) runs, and what it does for a cast:
each session's state, the errors a schedule can end with, a step's error as the transcript
prints it (normalised), and the actors in worker processes with their faults (declared in
lab/pinned/stage.py): their events, their start, pause, wake and kill."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lab.aio import until
from lab.core.steps import Session
from lab.errors import ScenarioFailure
from lab.pinned.interleave import Fetcher
from lab.pinned.stage import Fault, InProcess
from lab.pinned.transcript import StepClock, Transcript, error_fields
from lab.procs.workers import Event, Worker

if TYPE_CHECKING:
    from lab.core.env import Env


class ScheduleError(ScenarioFailure):
    """Session code asked for a step its schedule does not have where it asked for it."""


class Aborted(BaseException):
    """Raised at a step point when the sequencer ends a run early: the session's code
    unwinds through its transaction (ROLLBACK) and the connection stays usable."""


class InvalidPermutation(Exception):
    """The schedule asked a blocked session for its next step (the isolation tester's
    "invalid permutation"): skipped and counted, not a failure."""

    def __init__(self, at: int, why: str) -> None:
        super().__init__(why)
        self.at = at  # index of the offending schedule item
        self.why = why


@dataclass
class SessionState:
    session: Session
    pid: int  # its backend, for the server's look (0: none to look at)
    proc: InProcess | None = None  # it runs in a worker process
    worker: Worker | None = None
    frozen: bool = False  # stopped by a pause fault (SIGSTOP), until its wake
    pending: str | None = None  # the step it asked for, not yet granted
    shown: str = ""
    grant: asyncio.Event = field(default_factory=asyncio.Event)
    running: str | None = None  # the granted step in progress
    result: str | None = None  # the granted step's result, until its line is printed
    more: list[str] = field(default_factory=list)  # and its DETAIL lines
    said_waiting: bool = False  # its running step's line said <waiting ...>
    blocked: bool = False  # as last seen by the server
    waits: Callable[[], Awaitable[bool]] | None = None
    ended: bool = False
    outcome: str = ""
    error: BaseException | None = None
    failure: str = ""  # a worker process's failure (it raised, it died)
    taken: list[str] = field(default_factory=list)
    epoch: int = 0  # bumped on every change the session makes (asks, ends a step, ends)


Code = Callable[[Session], Awaitable[str]]


class Cast:
    """The Sequencer's side of its sessions: their names in errors, and its actors in
    worker processes (what their events mean, their faults). The Sequencer holds the state."""

    db: Fetcher | None
    label: str
    env: Env | None
    states: dict[str, SessionState]
    names: dict[int, str]
    transcript: Transcript
    clock: StepClock

    def _end_step(
        self, st: SessionState, step: str, result: str, more: tuple[str, ...] | list[str]
    ) -> None:
        raise NotImplementedError

    def _notify(self, st: SessionState | None = None) -> None:
        raise NotImplementedError

    def normalise(self, text: str) -> str:
        """Pids become session names; xids, OIDs, ports and timestamps become letters."""

        def pid(m: re.Match[str]) -> str:
            return self.names.get(int(m[2]), "another process")

        text = re.sub(r"\b([Pp]rocess) (\d+)", pid, text)
        text = re.sub(r"\btransaction \d+", "transaction X", text)
        text = re.sub(r"\brelation \d+", "relation R", text)
        text = re.sub(r"\bdatabase \d+", "database D", text)
        text = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?", "T", text)
        return re.sub(r"\bport \d+", "port P", text)

    def error_text(self, exc: BaseException) -> tuple[str, list[str]]:
        return self.error_lines(error_fields(exc))

    def error_lines(self, e: Mapping[str, str]) -> tuple[str, list[str]]:
        """A step's error (lab.pinned.transcript.error_fields) as its line and DETAIL lines."""
        if "sqlstate" in e:
            head = f"ERROR {e['sqlstate']} {self.normalise(e['message'])}"
            more = [f"DETAIL {self.normalise(d)}" for d in e.get("detail", "").splitlines() if d]
            return head, more
        return f"ERROR {e['type']}: {self.normalise(e['message'])}", []

    # --- the actors in worker processes ----------------------------------------------------

    def _on_event(self, st: SessionState, ev: Event) -> None:
        f, name = ev.fields, st.session.name
        if ev.name == "asks":
            st.shown, st.pid = str(f.get("shown", "")), int(f.get("pid") or 0)
            if st.pid:
                self.names[st.pid] = name
        elif ev.name == "step":
            st.pending = str(f["step"])
        elif ev.name == "stepped":
            if "error" in f:
                head, more = self.error_lines(f["error"])
                self._end_step(st, str(f["step"]), head, more)
            else:
                self._end_step(st, str(f["step"]), str(f["result"]), ())
        elif ev.name == "returned":
            st.ended, st.outcome = True, str(f["result"])
            self.clock.session_ended(name)
        elif ev.name in ("error", "garbled"):
            st.ended, st.outcome = True, "error"
            st.failure = f"{name} failed: {f.get('error') or f.get('line')}"
        elif ev.name == "exit" and not st.ended:
            st.ended, st.outcome = True, "died"
            self.clock.session_ended(name)
            if st.worker is not None and not st.worker.killed:
                st.failure = f"{name} died: {st.worker.status()}"
        self._notify(st)

    async def _spawn(self, st: SessionState, proc: InProcess) -> None:
        st.worker = await Worker.spawn(
            proc.script,
            {**proc.config, "pinned": True},
            name=f"{self.label} {st.session.name}",
            on_event=lambda ev: self._on_event(st, ev),
            fork=True,
            preload=("lab.pinned.stage",),
        )

    async def _fault(self, st: SessionState, step: str, fault: Fault) -> None:
        """A fault step on a process actor (see lab/pinned/stage.py)."""
        w, name, who = st.worker, st.session.name, f"{st.session.name} {step}"
        assert w is not None
        self.clock.granted(name, step, "")
        if fault.kind == "wake":
            if not st.frozen:
                raise ScheduleError(f"{self.label}: {who}: {name} is not paused")
            w.resume()
            st.frozen = False
            self.clock.span(name, "frozen", start=False)
            self._fault_line(st, step, "SIGCONT", "running")
            return
        if fault.kind == "pause":
            if st.frozen:
                raise ScheduleError(f"{self.label}: {who}: {name} is paused already")
            await w.pause()
            st.frozen = True
            self.clock.span(name, "frozen", start=True)  # the kernel reports it stopped
        else:
            await w.kill()
            if st.pid and self.db is not None:  # and the server has ended its session
                await until(lambda: self._gone(st.pid), fault.seconds, f"{self.label}: {who}")
            self.clock.span(name, "frozen", start=False)
            st.frozen, st.running, st.pending = False, None, None
            st.ended, st.outcome = True, "killed"
            self.clock.session_ended(name)
        if fault.until is not None:
            check, env = fault.until, self.env
            assert env is not None, "a fault with a condition needs the run's Env"
            await until(lambda: check(env), fault.seconds, f"{self.label}: {who}: {fault.shown}")
        signal = "SIGSTOP" if fault.kind == "pause" else "SIGKILL"
        shown = signal + (f", then until {fault.shown}" if fault.shown else "")
        self._fault_line(st, step, shown, "stopped" if fault.kind == "pause" else "killed")

    async def _gone(self, pid: int) -> bool:
        """The server has ended backend `pid`: its locks and its transaction are gone."""
        assert self.db is not None
        rows = await self.db.fetch("SELECT 1 FROM pg_stat_activity WHERE pid = $1", pid)
        return not rows

    def _fault_line(self, st: SessionState, step: str, shown: str, result: str) -> None:
        self.transcript.add(f"{st.session.name} {step}", shown, f"-> {result}")
        self.clock.ended(st.session.name, step, result, shown)
