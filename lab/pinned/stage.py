"""Pin a cast of actors to a schedule: Redis commands, steps of a worker process, and the
faults on that process (pause, wake, kill) as steps of their own.

lab/pinned/sequencer.py pins asyncpg sessions and asks PostgreSQL when one is blocked. A lease
story needs more: a holder in a process of its own (lab/procs/workers.py) that the kernel
freezes between two of its steps, a lease that runs out while it is frozen, a holder that
is killed. A ``Stage`` runs such a cast under one schedule:

* an actor in the lab's event loop runs its code on a ``lab.core.steps.Session`` whose gate is
  the stage: each step point asks for its grant and reports its result;
* an actor in a worker process runs the same code on a Session whose gate is
  ``ChildGate``: a step point reports ``asks`` (the step and the command it runs), waits at
  ``child.step`` for the grant, and reports ``stepped`` (its result) when done;
* a fault step acts on a process actor from outside: ``pause`` sends SIGSTOP, waits until
  the kernel reports the process stopped, then until the condition the scenario declares
  for it holds (a lease gone in Redis: there time is the subject, a TTL); ``wake`` sends
  SIGCONT; ``kill`` sends SIGKILL and ends the actor as ``killed``.

After each step the stage settles: until every live actor asks for its next step, has
ended, or is frozen in a granted step it cannot run. The transcript is the sequencer's:
each step with its command and result, ``<waiting ...>`` for a step granted to a frozen
actor and ``<... completed>`` when it runs on after ``wake``, faults as lines of their own,
each actor's end, the invariants. It holds no pid, port, token or time, so one schedule
prints one text. As in the isolation tester, an actor that has ended has its remaining
steps skipped, and a step for an actor frozen in a granted step makes the permutation
invalid. An explored interleaving may name only some of the steps (``Staged``'s
``explore_steps``): the steps after it run in the cast's order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import asyncpg

from lab.aio import until, within
from lab.core.outcome import classify
from lab.core.steps import Pinned, Session, parse_step
from lab.errors import ScenarioFailure
from lab.pinned.sequencer import InvalidPermutation, ScheduleError
from lab.pinned.transcript import Line, StepClock, Transcript
from lab.procs.workers import Child, Event, Worker

if TYPE_CHECKING:
    from lab.core.scenario import Env

STEP_S = 20.0  # a granted step settles (its actor asks again, ends or is frozen) within this
END_S = 5.0  # the cast's tasks unwind within this when a run ends early


@dataclass(frozen=True)
class Fault:
    """A fault step on a process actor. `until` (for a pause) is what the stage waits for
    once the kernel reports the process stopped, `shown` says it in the transcript."""

    kind: Literal["pause", "wake", "kill"]
    until: Callable[[Env], Awaitable[bool]] | None = None
    shown: str = ""
    seconds: float = STEP_S


@dataclass(frozen=True)
class InProcess:
    """An actor that runs in a worker process: `script` (on lab.procs.workers, its step points on
    a ChildGate) with `config`; `faults` maps step names to the faults they are."""

    script: Path
    config: Mapping[str, Any]
    faults: Mapping[str, Fault] = field(default_factory=dict)


SessionsCode = Mapping[str, tuple[asyncpg.Connection, Callable[[Session], Awaitable[str]]]]


@dataclass(frozen=True)
class Staged(Pinned):
    """Pinned for a cast: the sessions named by `processes(env, variant)` run in worker
    processes (their lab connection stays idle), the others run `code[variant]` in the
    lab's loop. `explore_steps[variant]`, when given, are the steps explore interleaves."""

    processes: Callable[[Env, str], Mapping[str, InProcess]] | None = None
    explore_steps: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)

    def stage(
        self,
        env: Env,
        variant: str,
        sessions: SessionsCode,
        *,
        explored: bool,
        label: str,
        header: str,
        resolve_timeout: float = STEP_S,
    ) -> Stage:
        """The runner lab.pinned uses for this scenario instead of the Sequencer."""
        procs = {} if self.processes is None else dict(self.processes(env, variant))
        return Stage(env, sessions, procs, label=label, header=header, finish=explored)


class ChildGate:
    """A Session's gate inside a worker process: its step points ask the lab for grants
    over the worker protocol and report their results as events."""

    def __init__(self, child: Child) -> None:
        self.child = child

    async def ask(self, session: Session, step: str, shown: str) -> None:
        self.child.emit("asks", step=step, shown=shown)
        await self.child.step(step)

    def finished(self, session: Session, step: str, result: str) -> None:
        self.child.emit("stepped", step=step, result=f"-> {result}")

    def failed(self, session: Session, step: str, exc: BaseException) -> None:
        self.child.emit("stepped", step=step, result=error_text(exc))

    def waiting(self, session: Session, predicate: Callable[[], Awaitable[bool]] | None) -> None:
        return None


def error_text(exc: BaseException) -> str:
    if isinstance(exc, asyncpg.PostgresError):
        return f"ERROR {exc.sqlstate} {getattr(exc, 'message', '') or exc}"
    return f"ERROR {type(exc).__name__}: {exc}"


class _Aborted(BaseException):
    """Raised at a step point when a run ends early: the actor's code unwinds."""


@dataclass
class _Actor:
    name: str
    index: int
    proc: InProcess | None = None
    worker: Worker | None = None
    pending: str | None = None  # the step it asks for, not yet granted
    shown: str = ""
    grant: asyncio.Event = field(default_factory=asyncio.Event)
    running: str | None = None  # the granted step in progress
    result: str | None = None  # its result, until its line is printed
    said_waiting: bool = False
    frozen: bool = False
    ended: bool = False
    outcome: str = ""
    error: str = ""


class Stage:
    """One run of a cast under one schedule (see the module doc). `sessions` are the
    actors in the lab's loop (connection, code), `processes` those in worker processes."""

    def __init__(
        self,
        env: Env,
        sessions: SessionsCode,
        processes: Mapping[str, InProcess],
        *,
        label: str,
        header: str,
        finish: bool = False,
        timeout: float = STEP_S,
    ) -> None:
        self.env, self.label, self.finish, self.timeout = env, label, finish, timeout
        self.transcript = Transcript(header)
        self.waited: list[str] = []  # steps granted to a frozen actor
        self.clock = StepClock()  # the measured times, faults as steps (lab/pinned/sequencer.py)
        self.actors: dict[str, _Actor] = {}
        self._code: dict[str, tuple[Session, Callable[[Session], Awaitable[str]]]] = {}
        for i, (name, (conn, code)) in enumerate(sessions.items()):
            self.actors[name] = _Actor(name, i, proc=processes.get(name))
            if name not in processes:
                self._code[name] = (Session(name, conn, i, gate=self), code)
        self._granted: tuple[_Actor, str, str] | None = None
        self._done: list[tuple[int, Line]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._item = ""
        self._aborting = False

    # --- the Gate of the actors in the lab's loop ----------------------------------------

    async def ask(self, session: Session, step: str, shown: str) -> None:
        a = self.actors[session.name]
        if self._aborting:
            raise _Aborted
        a.pending, a.shown = step, shown
        a.grant.clear()
        await a.grant.wait()
        if self._aborting:
            raise _Aborted

    def waiting(self, session: Session, predicate: Callable[[], Awaitable[bool]] | None) -> None:
        return None

    def finished(self, session: Session, step: str, result: str) -> None:
        self._end_step(self.actors[session.name], step, f"-> {result}")

    def failed(self, session: Session, step: str, exc: BaseException) -> None:
        if not isinstance(exc, (asyncio.CancelledError, _Aborted)):
            self._end_step(self.actors[session.name], step, error_text(exc))

    def _end_step(self, a: _Actor, step: str, result: str) -> None:
        a.running = None
        if self._aborting:
            return
        self.clock.ended(a.name, step, result)
        if a.said_waiting:
            done = f"<... completed> {result.removeprefix('-> ')}"
            self._done.append((a.index, Line(f"{a.name} {step}", "", done)))
            a.said_waiting = False
        else:
            a.result = result

    # --- the actors in worker processes ----------------------------------------------------

    def _on_event(self, a: _Actor, ev: Event) -> None:
        f = ev.fields
        if ev.name == "asks":
            a.shown = str(f.get("shown", ""))
        elif ev.name == "step":
            a.pending = str(f["step"])
        elif ev.name == "stepped":
            self._end_step(a, str(f["step"]), str(f["result"]))
        elif ev.name == "returned":
            a.ended, a.outcome = True, str(f["result"])
            self.clock.session_ended(a.name)
        elif ev.name in ("error", "garbled"):
            a.ended, a.outcome = True, "error"
            a.error = f"{a.name} failed: {f.get('error') or f.get('line')}"
        elif ev.name == "exit" and not a.ended:
            a.ended, a.outcome = True, "died"
            self.clock.session_ended(a.name)
            if a.worker is not None and not a.worker.killed:
                a.error = f"{a.name} died: {a.worker.status()}"

    async def _spawn(self, a: _Actor, proc: InProcess) -> None:
        config = {**proc.config, "pinned": True}
        a.worker = await Worker.spawn(
            proc.script,
            config,
            name=f"{self.label} {a.name}",
            on_event=lambda ev: self._on_event(a, ev),
            fork=True,
            preload=("lab.pinned.stage",),
        )

    async def _fault(self, a: _Actor, step: str, fault: Fault) -> None:
        w, who = a.worker, f"{a.name} {step}"
        assert w is not None
        self.clock.granted(a.name, step, "")
        if fault.kind == "pause":
            if a.frozen:
                raise ScheduleError(f"{self.label}: {who}: {a.name} is paused already")
            await w.pause()
            a.frozen = True
            self.clock.span(a.name, "frozen", start=True)  # the kernel reports it stopped
            if fault.until is not None:
                check, env = fault.until, self.env
                await until(
                    lambda: check(env), fault.seconds, f"{self.label}: {who}: {fault.shown}"
                )
            shown = "SIGSTOP" + (f", then until {fault.shown}" if fault.shown else "")
            self.transcript.add(who, shown, "-> stopped")
            self.clock.ended(a.name, step, "stopped", shown)
        elif fault.kind == "wake":
            if not a.frozen:
                raise ScheduleError(f"{self.label}: {who}: {a.name} is not paused")
            w.resume()
            a.frozen = False
            self.clock.span(a.name, "frozen", start=False)
            self.transcript.add(who, "SIGCONT", "-> running")
            self.clock.ended(a.name, step, "running", "SIGCONT")
        else:
            await w.kill()
            self.clock.span(a.name, "frozen", start=False)
            a.frozen, a.running, a.pending = False, None, None
            a.ended, a.outcome = True, "killed"
            self.transcript.add(who, "SIGKILL", "-> killed")
            self.clock.ended(a.name, step, "killed", "SIGKILL")
            self.clock.session_ended(a.name)

    # --- running ---------------------------------------------------------------------------

    async def _main(self, a: _Actor, s: Session, code: Callable[[Session], Awaitable[str]]) -> None:
        try:
            a.outcome = await code(s)
        except _Aborted:
            a.outcome = "aborted"
        except asyncio.CancelledError:
            a.outcome = "cancelled"
            raise
        except Exception as exc:
            key = classify(exc)
            a.outcome = key or type(exc).__name__
            a.error = "" if key else f"{a.name} raised {type(exc).__name__}: {exc}"
        finally:
            a.ended, a.pending, a.running = True, None, None
            self.clock.session_ended(a.name)

    async def run(self, schedule: Sequence[str]) -> dict[str, str]:
        """Run `schedule`; each actor's outcome word. Raises InvalidPermutation (explore
        counts it), ScheduleError for a schedule that does not fit the cast or its code,
        ScenarioFailure when an actor failed or a step did not settle in time."""
        items = [parse_step(x) for x in schedule]
        for who, step in items:
            if who not in self.actors or not step:
                raise ScheduleError(
                    f"{self.label}: schedule step {who} {step!r}: actors are {', '.join(self.actors)}"
                )
        try:
            for a in self.actors.values():
                if a.proc is not None:
                    await self._spawn(a, a.proc)
            self.clock.start()  # the processes are up: the schedule starts here
            for name, (s, code) in self._code.items():
                self._tasks.append(asyncio.create_task(self._main(self.actors[name], s, code)))
            for k, (who, step) in enumerate(items):
                self._item = f"{who} {step}"
                await self._settle()
                await self._take(k, who, step, [s for w, s in items[k + 1 :] if w == who])
            self._item = "the end of the schedule"
            await self._settle()
            await self._to_the_end()
        finally:
            self.clock.end_ms = self.clock.now()
            await self.close()
        failed = [a.error for a in self.actors.values() if a.error]
        if failed:
            raise ScenarioFailure(f"{self.label}: {failed[0]}")
        for a in self.actors.values():
            self.transcript.add(a.name, "", f"ends {a.outcome}")
        return {a.name: a.outcome for a in self.actors.values()}

    async def _take(self, k: int, who: str, step: str, later: list[str]) -> None:
        a = self.actors[who]
        fault = a.proc.faults.get(step) if a.proc is not None else None
        if a.ended:
            self.transcript.add(f"{who} {step}", "", f"(skipped: {who} ended: {a.outcome})")
        elif fault is not None:
            await self._fault(a, step, fault)
            await self._settle()
        elif a.frozen and a.running is not None:
            raise InvalidPermutation(k, f"{who} {step}: {who} is frozen in {a.running}")
        elif a.pending != step and a.pending in later:
            self.transcript.add(f"{who} {step}", "", f"(skipped: {who} went on to {a.pending})")
        elif a.pending != step:
            raise ScheduleError(
                f"{self.label}: {who} asked for step {a.pending!r} where the schedule has {step!r}"
            )
        else:
            self._grant(a)

    async def _to_the_end(self) -> None:
        """After the schedule: with `finish`, each actor's remaining steps in cast order;
        then every actor must have ended (none left paused or asking)."""
        for a in self.actors.values():
            if a.frozen and not a.ended:
                raise ScheduleError(f"{self.label}: {a.name} is still paused after the schedule")
            if a.pending is not None and not self.finish:
                raise ScheduleError(
                    f"{self.label}: {a.name} asked for step {a.pending!r} after its last step "
                    "in the schedule"
                )
            for _ in range(1000):  # bounded: an actor's code has far fewer steps
                if a.ended or a.pending is None:
                    break
                self._item = f"{a.name} {a.pending} (after the schedule)"
                self._grant(a)
                await self._settle()
        await until(
            lambda: all(a.ended for a in self.actors.values()),
            self.timeout,
            f"{self.label}: every actor to end after the schedule",
        )

    def _settled(self) -> bool:
        for a in self.actors.values():
            if a.error:
                raise ScenarioFailure(f"{self.label}, at {self._item}: {a.error}")
        return all(
            a.ended or a.pending is not None or (a.frozen and a.running is not None)
            for a in self.actors.values()
        )

    async def _settle(self) -> None:
        """Until every actor asks, has ended or is frozen in its step; then print."""
        what = f"{self.label}, at {self._item}: every actor to ask for a step, end or freeze"
        await until(self._settled, self.timeout, what, every=0.001)
        self._flush()

    def _grant(self, a: _Actor) -> None:
        step = a.pending or ""
        a.running, a.pending, a.result, a.said_waiting = step, None, None, False
        self._granted = (a, step, a.shown)
        self.clock.granted(a.name, step, a.shown)
        if a.worker is not None:
            a.worker.grant(step)
        else:
            a.grant.set()

    def _flush(self) -> None:
        granted, self._granted = self._granted, None
        if granted is not None:
            a, step, shown = granted
            if a.result is not None:
                self.transcript.add(f"{a.name} {step}", shown, a.result)
                a.result = None
            elif a.running == step:
                self.clock.waiting(a.name, step)
                self.transcript.add(f"{a.name} {step}", shown, "<waiting ...>")
                self.waited.append(f"{a.name} {step}")
                a.said_waiting = True
        for _, line in sorted(self._done, key=lambda x: x[0]):
            self.transcript.lines.append(line)
        self._done.clear()

    async def close(self) -> None:
        """End what is still running: the actors in the lab unwind at their step points,
        the worker processes are killed by PID and reaped."""
        self._aborting = True
        for a in self.actors.values():
            a.grant.set()
        for a in self.actors.values():
            if a.worker is not None:
                await a.worker.close()
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                await within(asyncio.wait(self._tasks), END_S)
            for t in self._tasks:
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
