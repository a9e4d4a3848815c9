"""One order of unchanged programs' statements, run through the gate.

Each actor is a process started with PG* variables pointing at a port of the gate of its
own, so every connection it opens is known as its. The director holds every statement
and lets one go at a time. Between two grants it waits until every actor has settled,
by the same rules as the Sequencer: each live actor has a statement held at the gate, or
its running statements are reported blocked by the server (``pg_blocking_pids``), or it
has exited. A statement is done at the server's ReadyForQuery. When no statement is held
and every live actor is blocked, the server must break the cycle (the deadlock detector,
a lock timeout): the director waits for it.

Which held statement goes next is the caller's `choose(depth, decision, footprints)`:
explore replays a list of choices from the start (stateless), trace follows a schedule of
actor numbers. After each statement the director reads what the server shows its session
holding, the statement's footprint (lab/gate/reduce.py), which explore's reduction reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from lab.aio import within
from lab.errors import LabError
from lab.gate.actors import IDLE_S, Actor, called, cancel_calls, spawn, tail, takes_two
from lab.gate.commits import ends_alone, fresh, names_isolation, ruled_out, starts_named
from lab.gate.dsn import actor_env, call_dsn, redis_env
from lab.gate.keys import RedisSide
from lab.gate.proxy import Gate, Group, Session, Upstream
from lab.gate.redisgate import redis_gate
from lab.gate.wire import Statement
from lab.pinned.footprint import Footprint, Look, footprint, look
from lab.pinned.interleave import lock_waiters
from lab.pinned.rules import POLL_S

ORDER_S = 300.0  # one order, at most
LEASE = "<held until its lease"  # a candidate that is time, not a statement (lab/gate/keys.py)


@dataclass
class Held:
    """A statement waiting at the gate for its turn."""

    session: Session
    group: Group
    go: asyncio.Event = field(default_factory=asyncio.Event)
    lease: str = ""  # not a statement: the actor held until this key's lease runs out

    @property
    def actor(self) -> int:
        return self.session.actor

    def label(self, names: Mapping[Session, str]) -> str:
        return f"{names[self.session]}: {self.group.shown()}"


@dataclass
class Decision:
    """What was held at one point of an order, and which one went."""

    candidates: list[str]
    actors: list[int]  # the actor of each candidate
    chosen: int = -1  # -1 until the choice is made


@dataclass
class OrderRun:
    """What one order did: its decisions, transcript, and each actor's end."""

    decisions: list[Decision] = field(default_factory=list)
    transcript: list[str] = field(default_factory=list)
    exits: dict[int, int] = field(default_factory=dict)  # actor -> exit status
    errors: dict[int, list[str]] = field(default_factory=dict)  # actor -> SQLSTATEs received
    output: dict[int, str] = field(default_factory=dict)  # actor -> the end of its stderr
    statements: list[tuple[str, str]] = field(default_factory=list)  # (session, SQL inlined)
    error_messages: list[str] = field(default_factory=list)  # of every error, in order
    deadlocked: set[str] = field(default_factory=set)  # sessions that received a 40P01
    footprints: list[Footprint] = field(default_factory=list)  # of each granted statement
    redis_steps: int = 0  # Redis commands and leases run out (not in `statements`)

    @property
    def schedule(self) -> list[int | str]:
        """The actor of each granted statement, in order: a trace's --schedule ('t1' where
        actor 1 was held until its Redis lease ran out)."""
        return [
            f"t{d.actors[d.chosen]}" if LEASE in d.candidates[d.chosen] else d.actors[d.chosen]
            for d in self.decisions
        ]


Choose = Callable[[int, Decision, Sequence[Footprint]], int]


class Director:
    """The gate's keeper for one order (see the module doc)."""

    def __init__(
        self, observer: asyncpg.Connection, choose: Choose, redis: RedisSide | None = None
    ) -> None:
        self.observer = observer
        self.choose = choose
        self.redis = redis
        self.run = OrderRun()
        self.held: list[Held] = []
        self.running: dict[Session, str] = {}  # granted, no ReadyForQuery yet -> its text
        self.waiting: set[Session] = set()  # of those, reported blocked
        self.done: dict[Session, asyncio.Event] = {}
        self.changed = asyncio.Event()
        self.names: dict[Session, str] = {}
        self.exited: dict[int, int] = {}
        self._count: dict[int, int] = {}
        self._observing = asyncio.Lock()  # one query at a time on the observer
        self._after: dict[Session, Look] = {}  # read before a group that is no step went
        self.named: set[Session] = set()  # sessions that named an isolation level
        # what ended since the last settle (its lines), by when it began to wait (0: never)
        self._finished: list[tuple[int, list[str]]] = []
        self._wait_order: dict[Session, int] = {}
        self._waits = itertools.count(1)
        self.ruled_out = "the database was not read yet"  # why commits stay (lab/gate/commits.py)

    # --- the gate's Keeper ---

    async def opened(self, session: Session) -> None:
        n = self._count[session.actor] = self._count.get(session.actor, 0) + 1
        self.names[session] = f"a{session.actor}" + (f".{n}" if n > 1 else "")
        if session.store == "postgresql" and starts_named(session):
            self.named.add(session)
        self.changed.set()

    async def step(self, session: Session, group: Group) -> None:
        self._notice(session, group)
        held = Held(session, group)
        self.held.append(held)
        self.changed.set()
        await held.go.wait()

    async def between(self, session: Session, group: Group) -> None:
        """A group that is no step is about to go: pgx's Parse/Describe of its next
        statement takes that statement's locks already, so what the session's last step
        left is read now, for that step's footprint."""
        self._notice(session, group)
        if session.store == "redis" or session in self.running:
            return
        if session not in self._after:
            self._after[session] = await self._look(session)

    def _notice(self, session: Session, group: Group) -> None:
        """A session that names an isolation level no longer reads committed."""
        if session.store == "postgresql" and names_isolation(group.statements):
            self.named.add(session)

    def ready(self, session: Session, errors: list[str]) -> None:
        self.run.errors.setdefault(session.actor, []).extend(errors)
        self.run.error_messages.extend(session.last_messages)
        if "40P01" in errors:
            self.run.deadlocked.add(self.names[session])
        text = self.running.pop(session, None)
        lines, waited = [], 0
        if text is not None and session in self.waiting:
            self.waiting.discard(session)
            waited = self._wait_order.pop(session, 0)
            lines.append(f"step {self.names[session]}: <... completed>")
        if text is not None:
            lines.extend(f"ERROR:  {m}" for m in session.last_messages)
        self._finished.append((waited, lines))
        if session in self.done:
            self.done[session].set()
        self.changed.set()

    def ended(self, number: int, status: int) -> None:
        """Actor `number` exited with `status` (a statement it sent, then died with, is
        held no more)."""
        self.exited[number] = status
        self.held = [h for h in self.held if h.actor != number]
        self.changed.set()

    def closed(self, session: Session) -> None:
        self.running.pop(session, None)
        self.waiting.discard(session)
        if session in self.done:
            self.done[session].set()
        self.changed.set()

    # --- the order ---

    async def drive(self, actors: Collection[int]) -> None:
        """Grant statements one at a time until every actor has exited."""
        async with self._observing:
            self.ruled_out = await ruled_out(self.observer)
        depth = 0
        while True:
            await self._settle(actors)
            if not self.held:
                if len(self.exited) == len(actors):
                    return
                await self._wait_for_server(actors)  # every live actor is blocked
                continue
            candidates = sorted(
                self.held, key=lambda h: (h.actor, h.session.store, h.session.number)
            )
            candidates += await self._leases(candidates)
            labels = [h.label(self.names) for h in candidates]
            decision = Decision(labels, [h.actor for h in candidates])
            decision.chosen = self.choose(depth, decision, self.run.footprints)
            depth += 1
            self.run.decisions.append(decision)
            granted = candidates[decision.chosen]
            if granted.lease or granted.session.store == "redis":
                self.run.footprints.append(await self._redis_step(granted, actors))
                continue
            self._after.pop(granted.session, None)
            before = await self._look(granted.session)
            status, waited = granted.session.status, bool(self.waiting)
            await self._grant(granted)
            await self._settle(actors)
            self.run.footprints.append(await self._footprint(granted, before, status, waited))

    async def _leases(self, candidates: list[Held]) -> list[Held]:
        """Time as a step: each lease that may run out now, as a candidate of its actor's
        (held at its first statement waiting; lab/gate/keys.py)."""
        if self.redis is None:
            return []
        first: dict[int, Session] = {}
        for held in candidates:
            first.setdefault(held.actor, held.session)
        found = []
        for key, actor in await self.redis.leases(first):
            text = f"{LEASE} {key} runs out>"
            found.append(Held(first[actor], Group(statements=[Statement(text)]), lease=key))
        return found

    async def _redis_step(self, granted: Held, actors: Collection[int]) -> Footprint:
        """Grant a Redis command (or run a lease out); its footprint is its keys."""
        assert self.redis is not None
        name = self.names[granted.session]
        if granted.lease:
            left = await self.redis.run_out(granted.lease)
            self.run.redis_steps += 1
            self.run.transcript.append(
                f"step {name}: <held until its lease {granted.lease} ran out: "
                f"PTTL {left} ms, expired by the server>"
            )
            await self._settle(actors)
            lease = frozenset({f"redis {granted.lease}"})
            return Footprint(granted.actor, writes=lease, fresh=True)
        keys = await self.redis.keys(granted.group.commands)
        before = await self.redis.expiries(sorted(keys.writes))
        await self._grant(granted)
        await self._settle(actors)
        self.redis.leased(granted.actor, before, await self.redis.expiries(sorted(keys.writes)))
        if granted.session in self.running:
            return Footprint(granted.actor, everything="it did not end (a blocking command)")
        return self.redis.footprint(granted.actor, keys)

    async def _look(self, session: Session) -> Look:
        """What the server shows `session` holding now."""
        async with self._observing:
            return await look(self.observer, session.pid)

    async def _waiters(self, sessions: Collection[Session]) -> set[Session]:
        """Which of `sessions` their server reports waiting: on a lock (PostgreSQL), in a
        blocking command (Redis)."""
        pg = [s.pid for s in sessions if s.store == "postgresql"]
        ids = [s.pid for s in sessions if s.store == "redis"]
        async with self._observing:
            waits = set(await lock_waiters(self.observer, pg)) if pg else set()
        if ids and self.redis is not None:
            blocked = await self.redis.blocked(ids)
            return {s for s in sessions if s.pid in (blocked if s.store == "redis" else waits)}
        return {s for s in sessions if s.pid in waits}

    async def _footprint(self, held: Held, before: Look, status: str, waited: bool) -> Footprint:
        """The footprint of the granted statement `held`, now that every actor settled."""
        session = held.session
        why = ""
        if waited or self.waiting:
            why = "a session was blocked before or after it"
        elif session in self.running:
            why = "it did not end"
        elif held.actor in self.exited and not (ends_alone(held.group) and session.status == "I"):
            why = "its actor exited"  # (after its last COMMIT, nothing is left to see)
        elif "advisory" in held.group.shown().lower():
            why = "it names an advisory lock"
        early = self._after.pop(session, None)
        after = Look() if why else early or await self._look(session)
        statuses = (status, session.status)
        vouched = not self.ruled_out and session not in self.named
        vouched = vouched and fresh(held.group, statuses)
        return footprint(held.actor, before, after, statuses, why, vouched)

    async def _grant(self, held: Held) -> None:
        self.held.remove(held)
        session = held.session
        line = f"step {self.names[session]}: {held.group.shown()}"
        done = self.done[session] = asyncio.Event()
        self.running[session] = line
        self.run.transcript.append(line)
        sql = "; ".join(s.inlined() for s in held.group.statements)
        if session.store == "postgresql":
            self.run.statements.append((self.names[session], sql))
        else:
            self.run.redis_steps += 1
        held.go.set()
        while not done.is_set():
            if await self._waiters([session]) and not done.is_set():
                self.waiting.add(session)
                self.run.transcript[self.run.transcript.index(line)] = f"{line} <waiting ...>"
                return
            with contextlib.suppress(TimeoutError):
                await within(done.wait(), POLL_S)

    def _settled(self, actors: Collection[int]) -> list[int]:
        """The live actors that have not settled (see the module doc)."""
        unsettled = []
        for number in actors:
            if number in self.exited or any(h.actor == number for h in self.held):
                continue
            mine = [s for s in self.running if s.actor == number]
            if not mine or any(s not in self.waiting for s in mine):
                unsettled.append(number)
        return unsettled

    async def _settle(self, actors: Collection[int]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + IDLE_S
        while True:
            self.changed.clear()
            await self._look_at_waits()
            unsettled = self._settled(actors)
            if not unsettled:
                self._write_finished()
                return
            if loop.time() > deadline:
                last = self.run.transcript[-1] if self.run.transcript else "its start"
                raise LabError(
                    f"actor {unsettled[0]} neither sent a statement nor ended in {IDLE_S:.0f} s "
                    f"(after {last!r})"
                )
            with contextlib.suppress(TimeoutError):
                await within(self.changed.wait(), POLL_S if self.running else 0.5)

    def _write_finished(self) -> None:
        """The lines of the statements that ended since the last settle: a statement that
        did not wait first, then those that did, in the order they began to wait (as the
        isolation tester prints them), not in the order their ReadyForQuery happened to
        come in (two that a deadlock's end lets go of race)."""
        for _, lines in sorted(self._finished, key=lambda finished: finished[0]):
            self.run.transcript.extend(lines)
        self._finished.clear()

    async def _look_at_waits(self) -> None:
        """Mark running statements the server reports blocked."""
        if not self.running:
            return
        waits = await self._waiters(list(self.running))
        for session, line in list(self.running.items()):
            if session in waits and session not in self.waiting:
                self.waiting.add(session)
                self._wait_order[session] = next(self._waits)
                at = self.run.transcript.index(line)
                self.run.transcript[at] = f"{line} <waiting ...>"

    async def _wait_for_server(self, actors: Collection[int]) -> None:
        """Every live actor waits on a lock: a deadlock detector or a timeout ends it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ORDER_S
        while not self.held and len(self.exited) < len(actors):
            if not self.running:
                return  # nothing runs: _settle will see what the actors do next
            if loop.time() > deadline:
                raise LabError("every actor waits on a lock and the server never ended it")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await within(self.changed.wait(), POLL_S * 10)
            if any(s not in self.waiting for s in self.running):
                return


async def run_order(
    upstream: Upstream,
    observer: asyncpg.Connection,
    actors: Sequence[Actor],
    *,
    user: str,
    database: str,
    passfile: Path,
    choose: Choose,
    cwd: Path | None = None,
    redis: RedisSide | None = None,
) -> OrderRun:
    """Start the actors through a fresh gate (and a Redis gate, with `redis`), drive them
    to their ends, return the order."""
    director = Director(observer, choose, redis)
    procs: dict[int, asyncio.subprocess.Process] = {}
    said = {actor.number: bytearray() for actor in actors}
    calls: list[asyncio.Task[None]] = []
    try:
        async with Gate(upstream, director) as gate, redis_gate(redis, director) as rgate:
            tasks: list[asyncio.Task[None]] = []
            try:
                for actor in actors:
                    port = await gate.start(actor=actor.number)
                    if actor.call is not None:
                        args = [call_dsn(port, user, database, passfile)]
                        if rgate is not None and takes_two(actor.call):
                            args.append(redis_env(await rgate.start(actor.number))["REDIS_URL"])
                        run = called(actor, args, director.ended, said[actor.number])
                        calls.append(asyncio.create_task(run))
                        continue
                    env = actor_env(port, user, database, passfile, os.environ)
                    if rgate is not None:
                        env.update(redis_env(await rgate.start(actor=actor.number)))
                    proc = procs[actor.number] = await spawn(actor, env, cwd)
                    tasks.append(asyncio.create_task(tail(proc, said[actor.number])))
                    tasks.append(asyncio.create_task(_exit(actor.number, proc, director)))
                try:
                    await within(director.drive([a.number for a in actors]), ORDER_S)
                except TimeoutError:
                    raise LabError(f"one order took over {ORDER_S:.0f} s") from None
            finally:
                for proc in procs.values():
                    if proc.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, signal.SIGKILL)
                await asyncio.gather(*tasks, return_exceptions=True)
            for failure in gate.failures + (rgate.failures if rgate is not None else []):
                raise failure
    finally:  # the gate is closed: a function still in a statement has lost its socket
        await cancel_calls(calls)
    director.run.exits = dict(director.exited)
    director.run.output = {n: text.decode(errors="replace") for n, text in said.items()}
    return director.run


async def _exit(number: int, proc: asyncio.subprocess.Process, director: Director) -> None:
    director.ended(number, await proc.wait())
