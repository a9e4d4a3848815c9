"""Grant session steps in the order of a schedule, moving on when the server says so: the
one ordering engine of every pinned run (`locklab trace`, `explore`, verify's canonical
schedules, lab.testing's pytest plugin).

The sequencer runs K sessions' code concurrently, in the lab's event loop or in worker
processes with faults as steps of their own (lab/pinned/stage.py, cast.py). Each step point
(``lab.core.steps``) asks for a grant; the sequencer grants the schedule's next step, then
waits until every session has settled: it asks for its next grant, it has ended, the server
reports it waiting on a lock (``pg_blocking_pids()``, as the isolation tester's
``pg_isolation_test_session_is_blocked``; a Redis step declares its own test), or the kernel
holds its worker stopped (SIGSTOP). No sleep decides an order: a bounded poll does.

As in PostgreSQL's isolation tester:

* a step of a session still blocked makes the permutation invalid (``InvalidPermutation``)
  unless every live session is blocked: then the server must break the cycle (deadlock
  detector, lock timeout) and the sequencer waits for it (with `wait_blocked`, the
  tester's rule since PostgreSQL 14, it waits for that session's step in any case);
* a session that has ended (returned, or raised) has its remaining steps skipped, and a
  session that returned past a step (out of stock after its read) skips that step;
* the transcript prints each step with its SQL and result, ``<waiting ...>`` when the
  server reports the session blocked, ``<... completed>`` when it moves on;
* a step that ends by itself (``(*)`` in the schedule, or ``Rules.ends_by_itself``) is
  waited for before the next item (lab/pinned/rules.py);
* a waiter released inside a granted step (the step commits, or terminates the holder,
  and the waiter's own statement commits and releases the next one) completes within
  that step: the sequencer settles until every released session has ended its step or
  blocks again, and prints the completions after the step's line, in session order.

The transcript and the step clock beside it: lab/pinned/transcript.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from lab.aio import within
from lab.core.outcome import classify
from lab.core.steps import Backend, Session, on_its_own, parse_step
from lab.errors import ScenarioFailure
from lab.pinned.cast import Aborted, Cast, Code, InvalidPermutation, ScheduleError, SessionState
from lab.pinned.interleave import Fetcher, InterleaveTimeout, lock_waiters
from lab.pinned.rules import LAB_RULES, POLL_S, WAKE_S, Overdue, Rules, Watch
from lab.pinned.stage import InProcess
from lab.pinned.transcript import Line, StepClock, Transcript, completed

if TYPE_CHECKING:
    from lab.core.env import Env


class Sequencer(Cast):
    """Run `sessions` (name -> (connection, code)) under one schedule; see the module doc.

    `db` observes the server (a pool on the same database, not one of the sessions; None:
    nothing to look at); `label` names the run in errors ("SCENARIO / VARIANT").
    `processes` are the sessions that run in worker processes (their lab connection stays
    idle), with `env` for their faults' conditions. `rules` says how the schedule is run
    (lab/pinned/rules.py). `overdue(states, n)` is called each
    time a step has run `rules.timeout` more seconds without ending or blocking (n = 1,
    2, ...), where there would be an InterleaveTimeout: it may cancel the step, or raise.
    `watch` is told of every item (see Watch).
    """

    def __init__(
        self,
        db: Fetcher | None,
        sessions: Mapping[str, tuple[Backend | None, Code]],
        *,
        label: str,
        header: str = "",
        rules: Rules = LAB_RULES,
        processes: Mapping[str, InProcess] | None = None,
        env: Env | None = None,
        overdue: Overdue | None = None,
        watch: Watch | None = None,
    ) -> None:
        self.db = db
        self.rules = rules
        self.label = label
        self.env, procs = env, dict(processes or {})
        self.overdue, self.watch = overdue, watch
        self._launched: dict[str, int] = {}  # session -> when its running step was granted
        self._grants = 0
        self.code = {name: code for name, (_, code) in sessions.items()}
        self.states: dict[str, SessionState] = {}
        for i, (name, (conn, _)) in enumerate(sessions.items()):
            s = Session(name, conn, i, gate=self)
            pid = conn.get_server_pid() if conn is not None and name not in procs else 0
            self.states[name] = SessionState(s, pid, proc=procs.get(name))
        self.names = {st.pid: name for name, st in self.states.items() if st.pid}
        self.transcript = Transcript(header)
        self._changed = asyncio.Event()
        self._granted: tuple[SessionState, str, str] | None = None  # session, step, its SQL
        self._done: list[tuple[int, Line]] = []  # completions seen while settling
        self._item = ""
        self._aborting = False
        self._own = False  # the granted step is marked (*): it ends by itself
        self._tasks: dict[str, asyncio.Task[None]] = {}  # the sessions in the lab's loop
        self.waited: list[str] = []  # "s2 write": steps the server showed blocked
        self.clock = StepClock()  # the measured times (see the module doc)

    # --- the Gate side: called from the sessions' step points ----------------------------

    async def ask(self, session: Session, step: str, shown: str) -> None:
        st = self.states[session.name]
        if self._aborting:
            raise Aborted
        st.pending, st.shown = step, shown
        st.grant.clear()
        self._notify(st)
        await st.grant.wait()
        if self._aborting:
            raise Aborted

    def waiting(self, session: Session, predicate: Callable[[], Awaitable[bool]] | None) -> None:
        self.states[session.name].waits = predicate

    def finished(self, session: Session, step: str, result: str) -> None:
        self._end_step(self.states[session.name], step, f"-> {result}", ())

    def failed(self, session: Session, step: str, exc: BaseException) -> None:
        if isinstance(exc, asyncio.CancelledError):
            return
        head, more = self.error_text(exc)
        self._end_step(self.states[session.name], step, head, more)

    def _end_step(self, st: SessionState, step: str, result: str, more: Sequence[str]) -> None:
        st.running, st.waits, st.blocked = None, None, False
        if self._aborting:
            return
        self.clock.ended(st.session.name, step, result)
        st.taken.append(step)
        if st.said_waiting:
            line = Line(f"{st.session.name} {step}", "", completed(result))
            line.more = list(more)
            self._done.append((st.session.index, line))
            st.said_waiting = False
        else:
            st.result, st.more = result, list(more)
        self._notify(st)

    def _notify(self, st: SessionState | None = None) -> None:
        if st is not None:
            st.epoch += 1
        self._changed.set()

    # --- running -------------------------------------------------------------------------

    async def _main(self, st: SessionState) -> None:
        try:
            st.outcome = await self.code[st.session.name](st.session)
        except asyncio.CancelledError:
            st.outcome = "cancelled"
            raise
        except Aborted:
            st.outcome = "aborted"
        except BaseException as exc:
            key = classify(exc)
            st.outcome, st.error = (key, None) if key else (type(exc).__name__, exc)
        finally:
            st.ended, st.pending, st.running, st.blocked = True, None, None, False
            self.clock.session_ended(st.session.name)
            self._notify(st)

    async def run(self, schedule: Sequence[str]) -> dict[str, str]:
        """Grant `schedule`'s steps in order; each session's outcome word (or SQLSTATE).

        Raises InvalidPermutation (counted by explore), ScheduleError for a schedule that
        does not fit the code, InterleaveTimeout when a step neither finished nor blocked,
        ScenarioFailure when session code raised something undeclared or a worker failed.
        """
        items = [parse_step(x) for x in schedule]
        for who, step in items:
            if who not in self.states or not step:
                raise ScheduleError(
                    f"{self.label}: schedule step {who} {step!r}: sessions are "
                    f"{', '.join(self.states)}"
                )
        self._tasks = {}
        try:
            for st in self.states.values():
                if st.proc is not None:
                    await self._spawn(st, st.proc)
            self.clock.start()  # the processes are up: the schedule starts here
            for name, st in self.states.items():
                if st.proc is None:
                    self._tasks[name] = asyncio.create_task(self._main(st))
            for k, (who, step) in enumerate(items):
                self._item = f"{who} {step}"
                await self._settle()
                later = [s for w, s in items[k + 1 :] if w == who]
                await self._take(k, self.states[who], step, later, on_its_own(schedule[k]))
            self._item = "the end of the schedule"
            await self._to_the_end()
            if self.watch is not None:
                await self.watch.ended()
            await asyncio.gather(*self._tasks.values())
        finally:
            self.clock.end_ms = self.clock.now()
            tasks = list(self._tasks.values())
            if not all(t.done() for t in tasks):
                await self._abort(tasks)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for st in self.states.values():
                if st.worker is not None:  # killed by PID and reaped
                    await st.worker.close()
        for name, st in self.states.items():
            if st.error is not None:
                raise ScenarioFailure(
                    f"{self.label}: {name} raised {type(st.error).__name__}: {st.error}"
                ) from st.error
            if st.failure:
                raise ScenarioFailure(f"{self.label}: {st.failure}")
        for name, st in self.states.items():
            self.transcript.add(name, "", f"ends {st.outcome}")
        return {name: st.outcome for name, st in self.states.items()}

    async def _take(self, k: int, st: SessionState, step: str, later: list[str], own: bool) -> None:
        """Schedule item `k`: `st`'s `step` (`later`: its steps after this one)."""
        who = st.session.name
        fault = st.proc.faults.get(step) if st.proc is not None else None
        if not st.ended and st.blocked and self.rules.wait_blocked:
            await self._wait_for(st)
        elif not st.ended and st.blocked and self._all_blocked():
            await self._resolve()
        if self.watch is not None:
            await self.watch.due(k, who)
        if st.ended:
            why = f"{who} ended: {st.outcome}"
            self.transcript.add(f"{who} {step}", "", f"(skipped: {why})")
        elif fault is not None:
            await self._fault(st, step, fault)
            await self._settle()
        elif st.frozen and st.running is not None:
            raise InvalidPermutation(k, f"{who} {step}: {who} is frozen in {st.running}")
        elif st.blocked:
            raise InvalidPermutation(
                k, f"{who} {step}: {who} is still blocked in {st.running or 'its step'}"
            )
        elif st.pending != step and st.pending in later:
            self.transcript.add(f"{who} {step}", "", f"(skipped: {who} went on to {st.pending})")
        elif st.pending != step:
            raise ScheduleError(
                f"{self.label}: {who} asked for step {st.pending!r} where the schedule has {step!r}"
            )
        else:
            self._grant(st, own=own)
            if self.watch is not None:
                await self._settle()
                await self.watch.granted(k, who)
            if self._own:
                await self._until_ended(st, step)
            elif f"{who} {step}" in self.rules.ends_by_itself:
                await self._ended_if_blocked(st, step)

    async def _to_the_end(self) -> None:
        """After the schedule: with `finish`, each session's remaining steps in cast order;
        then every session must end (none left paused or asking)."""
        await self._settle()
        if self.rules.wait_blocked:
            order = sorted(
                self.states.values(), key=lambda st: self._launched.get(st.session.name, 0)
            )
            for st in order:
                if not st.ended and st.running is not None and st.blocked:
                    await self._wait_for(st)
        for name, st in self.states.items():
            if st.frozen and not st.ended:
                raise ScheduleError(f"{self.label}: {name} is still paused after the schedule")
            for _ in range(1000 if self.rules.finish else 0):  # bounded: code has far fewer steps
                if st.ended or st.pending is None:
                    break
                self._item = f"{name} {st.pending} (after the schedule)"
                self._grant(st)
                await self._settle()
        while True:
            await self._settle()
            for name, st in self.states.items():
                if not st.ended and st.pending is not None:
                    raise ScheduleError(
                        f"{self.label}: {name} asked for step {st.pending!r} after its "
                        "last step in the schedule"
                    )
            if all(st.ended for st in self.states.values()):
                return
            await self._resolve()  # every live session is blocked

    async def _abort(self, tasks: Sequence[asyncio.Task[None]]) -> None:
        """End an unfinished run: sessions waiting for a grant unwind (ROLLBACK), those
        blocked in a statement are cancelled by the server (pg_cancel_backend). Sessions
        that do not end within a second have their connections closed."""
        self._aborting = True
        in_step = [st for st in self.states.values() if not st.ended and st.pending is None]
        try:
            pids = [st.pid for st in in_step if st.pid and st.proc is None]
            if pids and self.db is not None:  # first the blocked statements, while nobody
                # releases their locks
                await self.db.fetch(
                    "SELECT pg_cancel_backend(pid) FROM unnest($1::int[]) AS pid", pids
                )
                mine = [self._tasks[st.session.name] for st in in_step if st.proc is None]
                await asyncio.wait(mine, timeout=1.0)
            for st in self.states.values():
                st.grant.set()
            _, pending = await asyncio.wait(tasks, timeout=1.0)
        except Exception:
            pending = {t for t in tasks if not t.done()}
        if pending:  # nothing a run left half done is reused
            for st in self.states.values():
                if st.session.backend is not None:
                    st.session.backend.terminate()

    def _grant(self, st: SessionState, own: bool = False) -> None:
        self._own = own
        st.running, st.pending = st.pending, None
        st.result, st.more, st.said_waiting = None, [], False
        self._granted = (st, st.running or "", st.shown)
        self._grants += 1
        self._launched[st.session.name] = self._grants
        self.clock.granted(st.session.name, st.running or "", st.shown)
        if st.worker is not None:
            st.worker.grant(st.running or "")
        else:
            st.grant.set()

    def _epochs(self) -> int:
        return sum(st.epoch for st in self.states.values())

    def _all_blocked(self) -> bool:
        if self.rules.persist and any(st.ended for st in self.states.values()):
            return False
        live = [st for st in self.states.values() if not st.ended]
        return bool(live) and all(st.blocked for st in live)

    def _busy(self, st: SessionState) -> bool:
        """Neither asking nor ended nor held stopped in its step (it runs, or it is blocked)."""
        if st.failure:
            raise ScenarioFailure(f"{self.label}, at {self._item}: {st.failure}")
        return not st.ended and st.pending is None and not (st.frozen and st.running)

    async def _settle(self) -> None:
        """Until every live session asks for a grant, has ended, is blocked or is frozen in
        its step."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.rules.timeout
        late = 0  # times `overdue` was called
        grace: dict[str, tuple[int, float]] = {}  # session -> (its epoch, grace ends at)
        while True:
            busy = [st for st in self.states.values() if self._busy(st)]
            now = loop.time()
            graces = []
            for st in busy:
                if st.blocked:
                    continue
                name = st.session.name
                if name not in grace or grace[name][0] != st.epoch:
                    # it just moved: its step granted, or its step ended and its code
                    # goes on to the next step point (BEGIN, a retry), which it mostly
                    # reaches within POLL_S; asking the server sooner would find it
                    # running (3 of 4 looks did, between two steps). Not longer: code
                    # between steps may block too, and would be seen blocked late
                    grace[name] = (st.epoch, now + POLL_S)
                if (left := grace[name][1] - now) > 0:
                    graces.append(left)
            if graces:
                # each wait ends at the next change: the server, not this wait, still
                # says who is blocked
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await within(self._changed.wait(), min(graces))
                continue
            if busy:
                epochs = [st.epoch for st in busy]
                before = self._epochs()
                pids = [st.pid for st in busy if st.pid]
                waits = await lock_waiters(self.db, pids) if pids and self.db else {}
                for st, epoch in zip(busy, epochs, strict=True):
                    blocked = st.pid in waits or (st.waits is not None and await st.waits())
                    # an answer about a session that moved on meanwhile is stale
                    st.blocked = blocked and st.epoch == epoch
                if self._epochs() != before:
                    # another session moved during the look (its step ended, and may have
                    # released the lock a busy one was seen waiting for): look again
                    for st in busy:
                        st.blocked = False
                    continue
                busy = [st for st in busy if self._busy(st)]
            if all(st.blocked for st in busy):
                self._flush()
                return
            if loop.time() > deadline and self.overdue is not None:
                late += 1
                await self.overdue([st for st in busy if not st.blocked], late)
                deadline = loop.time() + self.rules.timeout
                continue
            if loop.time() > deadline:
                stuck = ", ".join(f"{st.session.name} in {st.running or 'its code'}" for st in busy)
                raise InterleaveTimeout(
                    f"{self.label}, at {self._item}: {stuck} neither finished nor blocked "
                    f"in {self.rules.timeout} s"
                )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await within(self._changed.wait(), POLL_S)

    async def _until_ended(self, st: SessionState, step: str) -> None:
        """A step marked (*): settle, wait until it has ended by itself, then settle again,
        which prints its <... completed> line."""
        await self._settle()
        await self._server_moves(
            lambda: st.ended or st.running != step, "(*): it did not end by itself"
        )
        self._own = False
        await self._settle()

    async def _ended_if_blocked(self, st: SessionState, step: str) -> None:
        """A step declared to end by itself: settle; if the server shows it blocked, wait
        until it has ended, then settle again, which prints its <... completed> line."""
        await self._settle()
        if st.ended or st.running != step or not st.blocked:
            return
        await self._server_moves(
            lambda: st.ended or st.running != step, ": it was blocked and did not end by itself"
        )
        await self._settle()

    async def _wait_for(self, st: SessionState) -> None:
        """`wait_blocked`: until `st`'s blocked step has ended (a lock released, a timeout),
        calling `overdue` each `timeout` seconds; then settle."""
        step, late = st.running, 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.rules.timeout
        while not st.ended and st.running == step:
            if loop.time() > deadline:
                if self.overdue is None:
                    raise InterleaveTimeout(
                        f"{self.label}, at {self._item}: {st.session.name} in {step} did not "
                        f"end in {self.rules.timeout} s"
                    )
                late += 1
                await self.overdue([st], late)
                deadline = loop.time() + self.rules.timeout
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await within(self._changed.wait(), WAKE_S)
        await self._settle()

    async def _resolve(self) -> None:
        """Every live session is blocked: wait for the server to end one wait, then settle."""
        before = {n: (st.running, st.ended) for n, st in self.states.items()}
        await self._server_moves(
            lambda: {n: (st.running, st.ended) for n, st in self.states.items()} != before,
            ": every session blocked and the server broke no wait",
        )
        await self._settle()

    async def _server_moves(self, moved: Callable[[], bool], failure: str) -> None:
        """Until `moved()`, which only the server can bring about (a deadlock detector, a
        timeout); past `resolve_timeout` InterleaveTimeout, naming the item and `failure`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.rules.resolve_timeout
        while not moved():
            if loop.time() > deadline:
                raise InterleaveTimeout(
                    f"{self.label}, at {self._item}{failure} in {self.rules.resolve_timeout} s"
                )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await within(self._changed.wait(), WAKE_S)

    def _flush(self) -> None:
        """Print the granted step's line, then completions in session order."""
        granted, self._granted = self._granted, None
        if granted is not None:
            st, step, shown = granted
            who = f"{st.session.name} {step}"
            if self._own and st.result is not None:  # (*): it ended before it was seen blocked
                self.clock.waiting(st.session.name, step)
                self.transcript.add(who, shown, "<waiting ...>")
                done = completed(st.result)
                self.transcript.add(who, "", done, st.more)
                st.result = None
            elif st.result is not None:
                self.transcript.add(who, shown, st.result, st.more)
                st.result = None
            elif st.running == step:
                self.clock.waiting(st.session.name, step)
                self.transcript.add(who, shown, "<waiting ...>")
                self.waited.append(who)
                st.said_waiting = True
        for _, line in sorted(self._done, key=lambda x: x[0]):
            self.transcript.lines.append(line)
        self._done.clear()
