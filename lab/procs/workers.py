"""Worker processes the harness owns: one protocol, faults as steps, and they die with the lab.

A scenario that needs code in a process of its own (a holder the kernel can freeze, a pod
that can be killed) writes that code as a small script and asks the harness for it::

    w = await Worker.spawn(SCRIPT, {"who": "A", ...}, name="A")   # config in
    ev = await w.wait_for("step")                                 # the child waits at a step
    await w.pause()                                               # SIGSTOP, kernel says 'T'
    w.resume()                                                    # SIGCONT
    w.grant("write")                                              # it may run its next step
    done = await w.wait_for("returned")
    await w.close()

The script's side is ``run_child(main)``, where ``main(child)`` reads ``child.config``,
reports with ``child.emit(event, **fields)`` and stops at ``await child.step(name)`` until
the harness grants it.

The protocol is JSON lines. The lab writes the config as the first line of the child's
stdin, then one ``{"grant": STEP}`` line per step it grants. The child writes one object per
line on stdout: ``{"event": NAME, "t": T, ...}``, where ``T`` is ``time.perf_counter()`` *in
the child*: on Linux that is CLOCK_MONOTONIC, the system-wide clock the lab's own trace
reads, so ``(T - env.t0) * 1000`` places the child's event on the run's clock with no
round trip (``Event.at_ms``). Its events: ``ready`` (after the config), ``step`` (waiting for
a grant), the script's own, then ``returned`` (with the value ``main`` returned) or ``error``;
the lab adds ``exit`` (stamped with its own clock) when the child's stdout closes.

Lifetime. The child gets the lab's PID as ``argv[1]`` and sets PR_SET_PDEATHSIG (SIGKILL,
which also ends a stopped process); if the lab is already gone it exits at once, before
reading anything. The lab side records the child in a lab folder of its own
(``lab.procs.lifecycle``), so the reaper stops it should the lab die in a way the death
signal misses (it fires when the spawning *thread* ends), and ``close`` stops it by PID and
removes the folder. Every wait is bounded (``lab.aio.within``) and fails loudly, naming the
worker, what was awaited, its exit status and the end of its stderr.

This module imports only the standard library and ``lab.aio`` at import time: worker
scripts import it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lab.aio import within
from lab.errors import ScenarioFailure
from lab.procs import die_with_parent
from lab.procs import proc_state as proc_state  # the workers protocol re-exports it

READY_S = 30.0  # a fresh interpreter importing asyncpg/redis on a loaded 2-core machine
WAIT_S = 20.0  # default bound of one wait for an event
STOP_S = 5.0  # until the kernel reports a SIGSTOPped worker stopped, or a killed one gone
STOP_POLL_S = 0.0005  # how often /proc is read while waiting for the stop
STDERR_KEEP = 4000  # characters of the child's stderr kept for the failure message


class WorkerError(ScenarioFailure):
    """A worker process did not do what the harness waited for (named, with its stderr)."""


@dataclass(frozen=True)
class Event:
    """One line a worker wrote: its name, the child's clock, and the rest of its fields."""

    name: str
    t: float  # the child's time.perf_counter() when it wrote the line (seconds)
    fields: dict[str, Any] = field(default_factory=dict)

    def at_ms(self, t0: float) -> float:
        """The event on a clock that started at ``t0`` (a ``time.perf_counter()`` reading)."""
        return (self.t - t0) * 1000


class Pipe(Protocol):
    """The lab's end of a worker's stdin: asyncio's StreamWriter, or a pipe transport."""

    def write(self, data: bytes) -> None: ...
    def is_closing(self) -> bool: ...
    def close(self) -> None: ...


class Proc(Protocol):
    """What the harness uses of a worker's process: asyncio's, or one the fork server
    forked (lab/procs/forkserver.py)."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stdin(self) -> Pipe | None: ...
    @property
    def stdout(self) -> asyncio.StreamReader | None: ...
    @property
    def stderr(self) -> asyncio.StreamReader | None: ...
    async def wait(self) -> int: ...


class Worker:
    """The lab's handle on one worker process (``spawn`` it; ``close`` it in a finally)."""

    def __init__(
        self,
        name: str,
        proc: Proc,
        folder: Path | None,
        on_event: Callable[[Event], None] | None,
    ) -> None:
        self.name, self.proc, self.folder = name, proc, folder
        self.on_event = on_event
        self.events: list[Event] = []  # every event so far, in the order written
        self.ended = False  # its stdout closed: it exited, died or was killed
        self.killed = False  # ended by the harness's kill(), not by itself
        self._cursor = 0  # events before this were returned by wait_for
        self._changed = asyncio.Event()
        self._stderr = b""
        self._tasks = [
            asyncio.create_task(self._read_events()),
            asyncio.create_task(self._read_stderr()),
        ]

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    async def spawn(
        cls,
        script: str | Path,
        config: Mapping[str, Any],
        *,
        name: str,
        on_event: Callable[[Event], None] | None = None,
        ready_s: float | None = READY_S,
        fork: bool = False,
        preload: Sequence[str] = (),
    ) -> Worker:
        """Start ``python script LAB_PID``, send `config` (on stdin: secrets stay out of argv)
        and return once it reported ``ready`` (`ready_s` None: at once, the caller waits for
        ``ready``, so several workers can start together). `on_event` sees every event.
        `fork`: forked by the fork server (lab/procs/forkserver.py) with the modules in `preload`
        imported there, instead of a fresh interpreter (its argv[1] is then the server's
        PID, the parent its death signal follows); a fresh one should the server fail."""
        from lab.procs import lifecycle  # stdlib only; kept out of the child's imports

        path, folder = _prepare(script)
        try:
            proc, parent = await _start(path, folder, fork, preload)
        except BaseException:
            lifecycle.remove_folder(folder)
            raise
        lifecycle.register(folder, proc.pid, sys.executable, signal.SIGKILL)
        if parent != os.getpid():  # the fork server: the reaper stops it with its children
            lifecycle.register(folder, parent, sys.executable, signal.SIGKILL)
        self = cls(name, proc, folder, on_event)
        try:
            self._write(dict(config), "its config")
            if ready_s is not None:
                await self.wait_for("ready", ready_s)
        except BaseException:
            await self.close()
            raise
        return self

    # --- the lab -> child direction -------------------------------------------------------

    def _write(self, obj: Mapping[str, Any], what: str, times: int = 1) -> None:
        """`obj` as `times` lines, in one write: a child that takes fewer and exits cannot
        close the pipe between two of them (a second write would then find it closed)."""
        assert self.proc.stdin is not None
        if self.ended or self.proc.stdin.is_closing():  # `what`, not `obj`: no password shown
            raise WorkerError(f"worker {self.name}: cannot send {what}: {self.status()}")
        self.proc.stdin.write((json.dumps(obj) + "\n").encode() * times)

    def send(self, message: Mapping[str, Any], what: str) -> None:
        """One JSON object to the child (`Child.receive`); `what` names it in an error."""
        self._write(message, what)

    def grant(self, step: str, times: int = 1) -> None:
        """Let the child run its step `step` (it reads the grant when it gets there), or
        `times` steps of that name: up to that many, since it may end before it takes them."""
        self._write({"grant": step}, f"the grant of {step!r}", times)

    # --- the child -> lab direction -------------------------------------------------------

    async def _read_events(self) -> None:
        assert self.proc.stdout is not None
        try:
            while raw := await self.proc.stdout.readline():
                try:
                    obj = json.loads(raw)
                    ev = Event(str(obj.pop("event")), float(obj.pop("t")), obj)
                except (ValueError, KeyError, TypeError, AttributeError):
                    ev = Event(
                        "garbled", time.perf_counter(), {"line": raw.decode(errors="replace")}
                    )
                self.events.append(ev)
                if self.on_event is not None:
                    self.on_event(ev)
                self._changed.set()
        finally:
            self.ended = True
            end = Event("exit", time.perf_counter(), {})  # the lab's clock: the child is gone
            self.events.append(end)
            if self.on_event is not None:
                self.on_event(end)
            self._changed.set()

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(4096):
            self._stderr = (self._stderr + chunk)[-STDERR_KEEP:]

    def status(self) -> str:
        """`pid N, running` / `exit 3` / `signal 9`, and the end of its stderr."""
        rc = self.proc.returncode
        how = "running" if rc is None else f"exit {rc}" if rc >= 0 else f"signal {-rc}"
        err = " ".join(self._stderr.decode(errors="replace").split()[-60:])
        return f"pid {self.pid}, {how}" + (f"; stderr: {err}" if err else "")

    async def wait_for(self, event: str, seconds: float = WAIT_S) -> Event:
        """The next `event` not yet returned by a wait (events before it are passed over,
        still in ``events``). Fails with WorkerError, named, when the child reports an
        error, ends first, or `seconds` pass."""
        return await self._take(lambda ev: ev.name == event, repr(event), seconds)

    async def next(self, seconds: float | None = WAIT_S, *, skip: Collection[str] = ()) -> Event:
        """The next event not yet returned by a wait, whatever its name (``exit`` last),
        passing over those named in `skip`; WorkerError after `seconds` (None: the caller
        bounds the wait)."""
        return await self._take(lambda ev: ev.name not in skip, "an event", seconds)

    async def _take(
        self, match: Callable[[Event], bool], what: str, seconds: float | None
    ) -> Event:
        async def look() -> Event:
            while True:
                if (hit := self._peek(match, what)) is not None:
                    self._cursor = hit[0] + 1
                    return hit[1]
                if self.ended:
                    with contextlib.suppress(TimeoutError):
                        await within(self.proc.wait(), STOP_S)
                    raise WorkerError(f"worker {self.name} ended before {what} ({self.status()})")
                self._changed.clear()
                await self._changed.wait()

        try:
            return await within(look(), seconds)
        except TimeoutError:
            raise WorkerError(
                f"worker {self.name}: no {what} within {seconds:g} s ({self.status()})"
            ) from None

    def _peek(self, match: Callable[[Event], bool], what: str) -> tuple[int, Event] | None:
        """(index, event) of the first event from the cursor on that `match`es, without
        taking it; WorkerError (the cursor past it) at an error or garbled line first."""
        for i in range(self._cursor, len(self.events)):
            ev = self.events[i]
            if match(ev):
                return i, ev
            if ev.name in ("error", "garbled"):
                self._cursor = i + 1
                raise WorkerError(
                    f"worker {self.name} failed before {what}: "
                    f"{ev.fields.get('error') or ev.fields.get('line')}"
                )
        return None

    # --- faults: pause, resume, kill ------------------------------------------------------

    async def pause(self, seconds: float = STOP_S) -> str:
        """SIGSTOP the whole process; returns once the kernel reports it stopped ('T')."""
        self._signal(signal.SIGSTOP)

        async def stopped() -> str:
            while (state := proc_state(self.pid)) not in ("T", "t"):
                if state in ("?", "Z"):
                    raise WorkerError(f"worker {self.name} is gone, not stopped ({self.status()})")
                await asyncio.sleep(STOP_POLL_S)
            return state

        try:
            return await within(stopped(), seconds)
        except TimeoutError:
            raise WorkerError(f"worker {self.name} not stopped after {seconds:g} s") from None

    def resume(self) -> None:
        """SIGCONT: a paused worker runs on from where the kernel stopped it."""
        self._signal(signal.SIGCONT)

    def sigkill(self) -> None:
        """SIGKILL now (a stopped worker too): no finally runs in it; ``kill`` also waits."""
        self.killed = True
        self._signal(signal.SIGKILL)

    def terminate(self) -> None:
        """SIGTERM: a worker that handles it ends its work and cleans up; ``close`` follows."""
        if self.proc.returncode is None and _ours(self.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)

    async def kill(self, seconds: float = STOP_S) -> int:
        """SIGKILL, and wait until the kernel has reaped it; returns its exit status."""
        self.sigkill()
        try:
            return await within(self.proc.wait(), seconds)
        except TimeoutError:
            raise WorkerError(
                f"worker {self.name} still alive {seconds:g} s after SIGKILL"
            ) from None

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc.returncode is not None or not _ours(self.pid):
            raise WorkerError(f"worker {self.name}: cannot send {sig.name}: {self.status()}")
        os.kill(self.pid, sig)

    async def close(self) -> None:
        """Stop the process by its PID (if still running), reap it, remove its lab folder."""
        from lab.procs import lifecycle

        if self.proc.returncode is None and lifecycle.still_ours(self.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)  # also ends a stopped process
        with contextlib.suppress(TimeoutError):
            await within(self.proc.wait(), STOP_S)
        # EOF follows the exit; a reader that ended with an exception (a KeyboardInterrupt
        # raised in it by a signal) must not cut this cleanup short: wait, never re-raise
        await asyncio.wait(self._tasks, timeout=1.0)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if (close := getattr(self.proc, "close", None)) is not None:
            close()  # a forked process: the lab's ends of its pipes
        if self.folder is not None:
            lifecycle.remove_folder(self.folder)
            self.folder = None


async def next_of(
    workers: Sequence[Worker], seconds: float | None = WAIT_S, *, skip: Collection[str] = ()
) -> tuple[Worker, Event]:
    """The next event of any of `workers` not yet returned by a wait, passing over those
    named in `skip`, and whose it is: of the events that have arrived, the one written
    first (the children's clock is the lab's). A child's ``error`` is returned like any
    event (as ``next`` does) unless skipped; then it is a WorkerError, named. A worker's
    ``exit`` comes after its other events; one that has ended is passed over after that.
    WorkerError when all have ended, or `seconds` pass (None: the caller bounds the wait).
    One loop over several workers' events, so a choreography writes none of its own."""

    def wanted(ev: Event) -> bool:
        return ev.name not in skip

    async def look() -> tuple[Worker, Event]:
        while True:
            hits = [
                (hit[1].t, n, w, hit)
                for n, w in enumerate(workers)
                if (hit := w._peek(wanted, "an event")) is not None
            ]
            if hits:
                _, _, w, (i, ev) = min(hits, key=lambda h: (h[0], h[1]))
                w._cursor = i + 1
                return w, ev
            if all(w.ended for w in workers):
                raise WorkerError(
                    f"workers {', '.join(w.name for w in workers)} all ended before an event "
                    f"({'; '.join(f'{w.name}: {w.status()}' for w in workers)})"
                )
            for w in workers:
                w._changed.clear()
            waits = [asyncio.ensure_future(w._changed.wait()) for w in workers if not w.ended]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in waits:
                    t.cancel()

    try:
        return await within(look(), seconds)
    except TimeoutError:
        names = ", ".join(w.name for w in workers)
        raise WorkerError(f"workers {names}: no event within {seconds:g} s") from None


async def _start(path: str, folder: Path, fork: bool, preload: Sequence[str]) -> tuple[Proc, int]:
    """The worker's process, and the PID its death signal follows (the lab's, or the fork
    server's)."""
    if fork:
        from lab.procs import forkserver

        if forkserver.enabled():
            try:
                return await forkserver.start(path, str(folder), preload)
            except OSError:
                forkserver.fallbacks += 1  # a fresh interpreter instead, as without `fork`
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        path,
        str(os.getpid()),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=folder,
        start_new_session=True,  # a Ctrl-C is the lab's to handle, not the worker's
    )
    return proc, os.getpid()


def _ours(pid: int) -> bool:
    """Whether `pid` is still the process the lab started (not a reused PID)."""
    from lab.procs import lifecycle

    return lifecycle.still_ours(pid)


def _prepare(script: str | Path) -> tuple[str, Path]:
    """The script's absolute path, and a fresh lab folder for the worker (see lifecycle)."""
    from lab.procs import lifecycle

    return str(Path(script).resolve()), lifecycle.folder_of(lifecycle.make_base_dir())


# --- the child's side ---------------------------------------------------------------------


class Child:
    """What a worker script sees: its config, `emit`, and `step` points the lab grants."""

    def __init__(self, config: dict[str, Any], stdin: asyncio.StreamReader) -> None:
        self.config = config
        self._stdin = stdin

    def emit(self, event: str, **fields: Any) -> None:
        """One line to the lab, stamped with this process's monotonic clock."""
        line = json.dumps({"event": event, "t": time.perf_counter(), **fields})
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    async def receive(self) -> dict[str, Any]:
        """The next object the lab sent (`Worker.send`); EOFError when the lab is gone."""
        return await self._line()

    async def _line(self) -> dict[str, Any]:
        raw = await self._stdin.readline()
        if not raw:
            raise EOFError("the lab closed this worker's stdin")
        obj = json.loads(raw)
        if not isinstance(obj, dict):
            raise ValueError(f"not a JSON object: {raw!r}")
        return obj

    async def step(self, name: str) -> None:
        """Report ``step`` and wait until the lab grants `name` (another grant is an error)."""
        self.emit("step", step=name)
        got = (await self._line()).get("grant")
        if got != name:
            raise RuntimeError(f"waiting at step {name!r}, granted {got!r}")


def run_child(main: Callable[[Child], Awaitable[Any]]) -> None:
    """A worker script's entry point: die with the lab, read the config, run `main`, and
    report ``returned`` with what it returned, or ``error`` (exit 1) when it raised."""
    die_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid())

    async def run() -> int:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        child = Child({}, reader)
        try:
            child.config = await child._line()
            child.emit("ready", pid=os.getpid())
            result = await main(child)
        except Exception as exc:
            tb = traceback.format_exception_only(exc)[-1].strip()
            child.emit(
                "error", error=f"{tb} (at {traceback.extract_tb(exc.__traceback__)[-1].name})"
            )
            return 1
        child.emit("returned", result=result)
        return 0

    sys.exit(asyncio.run(run()))
