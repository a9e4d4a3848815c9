"""Timed stories: steps that start at their planned times, actors whose trace lines are the
events the steps wait for, a worker-process actor frozen at its pause point, and a watcher
of whose token a Redis key holds.

A story whose subject is time (a lease's TTL against a holder's pause) cannot be pinned to
an order alone: `locklab run` tells it at the published times. ``run_steps`` starts each
step at its planned time and not before the step before it ended (the event it waits
for), after the guards it declares (an event the server reported: a lease gone), and fails
the run, naming the step, when one does not come within its bound. The same story pinned
to an order is lab/pinned/stage.py's. A race is a story in lanes: each lane's steps in
order, and the next step the first lane's whose guards came first, still one step at a
time (a step never starts while another is in progress): whichever pod reached its point
first goes first, as it did on the server.

* ``Actor``: an actor's trace lines (``report``) go to the run's trace and set its events:
  ``stalled`` (``stall``), ``turn`` (one of the events its steps end with), ``done``, and
  ``reached(event, n)``: its n-th report of `event`.
* ``ProcessActor``: an actor in a worker process (lab/procs/workers.py) whose pause point is
  the step ``wake``: when it gets there the lab stops it (SIGSTOP, and waits for the
  kernel's 'T'); ``wake`` grants it on and sends SIGCONT; ``kill`` sends SIGKILL.
* ``KeyWatch``: polls GET + PTTL + TIME of a key in one MULTI and keeps the spans during which
  each owner's token was its value, and how each ended (expired or deleted); a scenario
  starts and stops it from its ``Scenario.observers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from lab.aio import within
from lab.core.scenario import Env
from lab.errors import ScenarioFailure
from lab.procs import workers

OBSERVE_MS = 2.0  # how often a KeyWatch polls GET + PTTL + TIME
TURNS = ("write", "lock busy")  # the trace events that end an actor's turn by default
TEARDOWN_S = 5.0  # end_all's wait for the story's cancelled tasks


@dataclass(frozen=True)
class Step:
    """One step of a timed story: start `action` at `planned_ms`, after `guards` (what each
    waits for, the event), and the step ends when `ends` is set. Steps of one `lane` run in
    order; lanes side by side (``run_steps``)."""

    planned_ms: float
    name: str
    action: Callable[[], Awaitable[None] | None]
    ends: asyncio.Event
    guards: Sequence[tuple[str, asyncio.Event]] = ()
    lane: str = ""


async def bounded(event: asyncio.Event, what: str, seconds: float, label: str) -> None:
    """Wait for `event`; a ScenarioFailure naming `what` when it does not come in time."""
    try:
        await within(event.wait(), seconds)
    except TimeoutError:
        raise ScenarioFailure(f"{label}: stuck at {what} after {seconds:.0f} s") from None


async def run_steps(
    env: Env,
    steps: Sequence[Step],
    seconds: float,
    check: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Run `steps`, one at a time: each lane's in order of their planned times (ties keep
    their order), and the next step the first lane's that is due (its time come, its guards
    set), not before the step before it ended; every wait is bounded by `seconds`.
    `check(name)` runs after each step (it raises to fail the run). What ran when, for the
    record."""
    label = f"{env.scenario} / {env.variant}"
    lanes: dict[str, list[Step]] = {}
    for s in sorted(steps, key=lambda s: s.planned_ms):
        lanes.setdefault(s.lane, []).append(s)
    ran: list[dict[str, Any]] = []
    while any(lanes.values()):
        s, waited = await _next_due(env, [q[0] for q in lanes.values() if q], seconds, label)
        lanes[s.lane].pop(0)
        ran.append(
            {
                "step": s.name,
                "planned_ms": s.planned_ms,
                "at_ms": round(env.now_ms(), 1),
                "waited_for": waited,
            }
        )
        started = s.action()
        if started is not None:
            await started
        await bounded(s.ends, s.name, seconds, label)
        if check is not None:
            check(s.name)
    return ran


async def _next_due(
    env: Env, heads: Sequence[Step], seconds: float, label: str
) -> tuple[Step, list[str]]:
    """The first of `heads` (each lane's next step) to be due, and the guards it found
    unset at its planned time; of several due at once, the first lane's."""
    waited: dict[str, list[str]] = {}

    async def due(s: Step) -> None:
        await asyncio.sleep(max(0.0, s.planned_ms - env.now_ms()) / 1000)  # the planned time
        waited[s.name] = [what for what, ev in s.guards if not ev.is_set()]
        for what, ev in s.guards:
            await bounded(ev, f"{s.name}: waiting for {what}", seconds, label)

    tasks = [asyncio.ensure_future(due(s)) for s in heads]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for s, t in zip(heads, tasks, strict=True):
        if t.done() and not t.cancelled() and t.exception() is None:
            return s, waited[s.name]
    failed = next(t for t in tasks if not t.cancelled() and t.exception() is not None)
    raise cast(BaseException, failed.exception())


class Actor:
    """An actor as a timed story sees it: its trace lines become events to wait for."""

    def __init__(self, env: Env, who: str, turns: Collection[str] = TURNS) -> None:
        self.env, self.who, self.turns = env, who, turns
        self.stalled, self.turn, self.done = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._wake = asyncio.Event()
        self.seen: set[str] = set()
        self.counts: dict[str, int] = {}
        self._reached: dict[tuple[str, int], asyncio.Event] = {}
        self.outcome: str | None = None

    def report(self, event: str, *, at_ms: float | None = None, **fields: Any) -> None:
        self.env.trace(self.who, event, at_ms=at_ms, **fields)
        self.saw(event)

    def saw(self, event: str) -> None:
        """Count `event` and set what waits for it (``report`` without its trace line)."""
        self.seen.add(event)
        self.counts[event] = self.counts.get(event, 0) + 1
        if event == "stall":
            self.stalled.set()
        if event in self.turns:
            self.turn.set()
        reached = self._reached.get((event, self.counts[event]))
        if reached is not None:
            reached.set()

    def reached(self, event: str, times: int = 1) -> asyncio.Event:
        """Set once the actor has reported `event` `times` times (at once for 0)."""
        got = self._reached.setdefault((event, times), asyncio.Event())
        if self.counts.get(event, 0) >= times:
            got.set()
        return got

    async def run(self, body: Awaitable[str]) -> None:
        try:
            self.outcome = await body
        finally:
            self.end()

    def end(self, outcome: str | None = None) -> None:
        """The actor is over (each step waiting on it goes on); `outcome` if not yet known."""
        self.outcome = self.outcome or outcome
        for ev in (self.stalled, self.turn, self.done):
            ev.set()

    async def sleep_until_woken(self) -> None:
        """A stall in the lab's own event loop: an await it runs around, until `wake`."""
        t = self.env.now_ms()
        self.report("stall", how="await in the lab's event loop")
        await self._wake.wait()
        self.report("resume", frozen_ms=round(self.env.now_ms() - t, 1))

    def wake(self) -> None:
        self._wake.set()


class ProcessActor:
    """An actor in a worker process (``spawn`` it; ``close`` it in a finally); its events
    become `actor`'s trace. Its pause point is the step ``wake``: the lab stops it there."""

    def __init__(self, env: Env, actor: Actor) -> None:
        self.env, self.actor = env, actor
        self.w: workers.Worker | None = None
        self.error = ""
        self._stop: asyncio.Task[None] | None = None

    @classmethod
    async def spawn(
        cls, env: Env, actor: Actor, script: Path, cfg: Mapping[str, Any]
    ) -> ProcessActor:
        """Start `script` with `cfg`; returns once it is connected and waits for ``go``."""
        self = cls(env, actor)
        self.w = await workers.Worker.spawn(
            script, cfg, name=self._name(), on_event=self._on_event, fork=True
        )
        try:
            await self.w.wait_for("step")  # at "go": ready for its first step
        except BaseException:
            await self.close()
            raise
        return self

    @property
    def proc(self) -> workers.Proc:
        assert self.w is not None
        return self.w.proc

    def _on_event(self, ev: workers.Event) -> None:
        a, at = self.actor, ev.at_ms(self.env.t0)
        if ev.name in ("ready", "step"):
            if ev.fields.get("step") == "wake":  # at its pause point: the fault step "pause"
                self._stop = asyncio.create_task(self._pause(at))
        elif ev.name == "returned":
            a.end(ev.fields["result"])
        elif ev.name in ("error", "garbled"):
            self.error = f"{self._name()}: {ev.fields.get('error') or ev.fields.get('line')}"
            a.end()
        elif ev.name == "exit":
            if self.w is not None and not self.w.killed and a.outcome is None:
                self.error = self.error or f"{self._name()} died: {self.w.status()}"
                a.end()
        else:
            a.report(ev.name, at_ms=at, **ev.fields)

    def _name(self) -> str:
        return f"{self.env.scenario} worker {self.actor.who}"

    async def _pause(self, at_ms: float) -> None:
        assert self.w is not None
        try:
            state = await self.w.pause()
        except workers.WorkerError as exc:
            self.error = str(exc)
            self.actor.end()
            return
        self.actor.report("stall", at_ms=at_ms, how="SIGSTOP", pid=self.w.pid, process_state=state)

    def go(self) -> None:
        assert self.w is not None
        self.w.grant("go")

    def wake(self) -> None:
        """The fault step "resume": grant ``wake`` (read once it runs), then SIGCONT."""
        assert self.w is not None
        self.w.grant("wake")
        self.w.resume()

    async def kill(self) -> None:
        """The fault step "kill": the actor crashes while frozen; no finally, no release."""
        assert self.w is not None
        await self.w.kill()
        self.actor.report("killed", signal="SIGKILL")
        self.actor.end("killed")

    async def close(self) -> None:
        if self._stop is not None:
            self._stop.cancel()
            await asyncio.gather(self._stop, return_exceptions=True)
        if self.w is not None:
            await self.w.close()


def raised(tasks: Sequence[asyncio.Task[None]]) -> BaseException | None:
    """The first exception a finished task of the story raised, or None."""
    return next((t.exception() for t in tasks if t.done() and t.exception() is not None), None)


async def end_all(
    tasks: Sequence[asyncio.Task[None]], procs: Sequence[ProcessActor], conns: Sequence[Any]
) -> None:
    """A story's end, however it ended: its tasks cancelled (a bounded wait: a task that
    swallowed its cancel must not hang the run, and each exception retrieved), its worker
    processes closed, its connections terminated."""
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=TEARDOWN_S)
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()  # retrieved: the story reports a worker's failure itself (raised)
    for proc in procs:
        await proc.close()
    for conn in conns:
        conn.terminate()


@dataclass
class KeyWatch:
    """Whose token Redis holds as the value of `key`, polled with GET + PTTL + TIME in one
    MULTI.

    Whether a token expired or was deleted is read on Redis's own clock: each sighting puts
    its PX deadline at TIME + PTTL (PTTL is whole ms, so the deadline is that or up to 1 ms
    later), and a token that is gone at a poll whose TIME is at or past that deadline
    expired; gone before it, something deleted it. (On the lab's clock a poll ran somewhere
    between its send and its reply; under load that window grew to ~10 ms and put the
    deadline of an expired lease after the poll that saw it gone: "deleted".)
    The span's times are the lab's: its deadline is Redis's moved onto the lab's clock by
    the sighting with the shortest round trip (Redis's TIME against the middle of its send
    and reply), kept between the last poll that saw the token and the first that did not.
    A span starts at deadline - TTL (when the SET ran) and ends at the deadline when the
    token expired, or in the middle of the first poll that no longer saw it when deleted.
    """

    env: Env
    key: str
    owners: Mapping[str, str]  # token -> who
    ttl_ms: int
    spans: list[dict[str, Any]] = field(default_factory=list)
    first_poll: asyncio.Event = field(default_factory=asyncio.Event)
    free: asyncio.Event = field(default_factory=asyncio.Event)  # the last poll saw no lock
    running: bool = True
    _task: asyncio.Task[None] | None = None
    _gone: dict[str, asyncio.Event] = field(default_factory=dict)
    _cur: dict[str, Any] | None = None
    _prev_sent: float = 0.0
    _polls: int = 0
    _max_gap: float = 0.0

    def gone(self, who: str) -> asyncio.Event:
        """Set once `who`'s token is no longer the value (expired or deleted)."""
        return self._gone.setdefault(who, asyncio.Event())

    def start(self) -> None:
        self._task = asyncio.create_task(self.run())

    async def stop(self) -> None:
        """Stop polling (a flag, not only cancel(): one inside redis-py can be swallowed)."""
        self.running = False
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                await within(asyncio.shield(self._task), 5.0)
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def restart_clock(self) -> None:
        """The run's clock (env.t0) was reset: the next poll starts the record anew."""
        self.first_poll.clear()
        self._prev_sent = self.env.now_ms()

    async def run(self) -> None:
        while self.running:
            t0, sent = self.env.t0, self.env.now_ms()
            async with self.env.redis.pipeline(transaction=True) as pipe:
                pipe.get(self.key)
                pipe.pttl(self.key)
                pipe.time()
                value, pttl, (sec, usec) = await pipe.execute()
            reply = self.env.now_ms()
            if self.env.t0 != t0:  # the clock was reset during the poll: not on one clock
                continue
            who = self.owners.get(value.decode(), "?") if value is not None else None
            self._see(who, int(pttl), sent, reply, sec * 1000 + usec / 1000)
            self.first_poll.set()
            if who is None:
                self.free.set()
            else:
                self.free.clear()
            await asyncio.sleep(OBSERVE_MS / 1000)  # the poll's period

    def _see(self, who: str | None, pttl: int, sent: float, reply: float, now: float) -> None:
        """One poll: `who` holds the key (None: nobody) with `pttl` left, Redis's TIME `now`
        (ms), sent and answered at `sent` and `reply` on the lab's clock."""
        if self._polls:
            self._max_gap = max(self._max_gap, sent - self._prev_sent)
        self._polls += 1
        cur = self._cur
        if cur is not None and cur["who"] == who:
            cur["last_sent"] = sent
            if pttl >= 0:
                _sight(cur, now + pttl, reply - sent, now - (sent + reply) / 2)
        else:
            if cur is not None:
                self._ended(cur, sent, reply, now)
            self._cur = None
            if who is not None:
                cur = {"who": who, "after": self._prev_sent, "last_sent": sent, "start_ms": sent}
                cur.update(deadline=-math.inf, rtt=math.inf, offset=0.0)
                if pttl >= 0:
                    _sight(cur, now + pttl, reply - sent, now - (sent + reply) / 2)
                    start = max(self._prev_sent, _on_lab_clock(cur) - self.ttl_ms)
                    cur["start_ms"] = start
                self._cur = cur
                start = cur["start_ms"]
                self.env.trace("redis", f"lock value is {who}'s token", at_ms=start, pttl=pttl)
        self._prev_sent = sent

    def _ended(self, cur: dict[str, Any], sent: float, reply: float, now: float) -> None:
        """`cur`'s token is gone at the poll sent at `sent`, with Redis's TIME `now`."""
        known = math.isfinite(cur["deadline"])  # the key had a TTL
        expired = known and now >= cur["deadline"]  # on Redis's clock: gone by its PX
        deadline = _on_lab_clock(cur) if known else math.nan
        end = min(max(deadline, cur["last_sent"]), reply) if expired else (sent + reply) / 2
        start = max(cur["after"], deadline - self.ttl_ms) if known else cur["start_ms"]
        how = "expired" if expired else "deleted"
        span = {
            "who": cur["who"],
            "start_ms": start,
            "end_ms": end,
            "last_sent": cur["last_sent"],
            "gone_reply": reply,
            "how": how,
        }
        self.spans.append(span)
        self.env.trace("redis", f"lease of {cur['who']} {how}", at_ms=end)
        self.gone(cur["who"]).set()

    def stats(self) -> dict[str, Any]:
        return {
            "what": "GET + PTTL + TIME in one MULTI",
            "every_ms": OBSERVE_MS,
            "polls": self._polls,
            "max_gap_ms": round(self._max_gap, 1),
        }


def _sight(cur: dict[str, Any], deadline: float, rtt: float, offset: float) -> None:
    """A sighting with a TTL: the latest deadline on Redis's clock (a later PTTL is no less
    exact), and the clocks' offset from the sighting with the shortest round trip."""
    cur["deadline"] = max(cur["deadline"], deadline)
    if rtt < cur["rtt"]:
        cur["rtt"], cur["offset"] = rtt, offset


def _on_lab_clock(cur: dict[str, Any]) -> float:
    """The span's deadline on the lab's clock: Redis's, half a PTTL unit on, less the offset."""
    return float(cur["deadline"] + 0.5 - cur["offset"])
