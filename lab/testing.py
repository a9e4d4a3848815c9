"""Pinned runs of a user's own coroutines, for their own pytest suite.

The same machinery as ``locklab trace`` and ``locklab explore`` (``lab.pinned.sequencer``), without
a scenario file: give a DSN (the plugin's ``locklab_pg_dsn``), a setup, one coroutine per
session written on ``lab.core.steps.Session`` step points, and either a schedule or the steps
each session takes::

    async def buyer(s: Session) -> str:
        async with s.transaction():
            qty = await s.fetchval("read", "SELECT qty FROM stock WHERE sku = 'A-1'")
            if qty < 1:
                return "out_of_stock"
            await s.execute("take", "UPDATE stock SET qty = qty - 1 WHERE sku = 'A-1'")
        return "ok"

    async def stock_never_negative(db: asyncpg.Pool, outcomes: Mapping[str, str]) -> None:
        assert await db.fetchval("SELECT qty FROM stock") >= 0

    runs = await every_interleaving(dsn, setup, {"s1": buyer, "s2": buyer},
                                    steps={"s1": STEPS, "s2": STEPS},
                                    invariant=stock_never_negative)
    runs.assert_kept()  # fails naming the first interleaving that broke it, with its transcript

Before every run the database's ``public`` schema is dropped and `setup` runs again (given
a ``schema=`` coroutine with the DDL, `every_interleaving` makes the tables once and
empties them between runs instead, as ``locklab explore`` does: lab/pinned/fastreset.py); each
session gets a fresh connection, whose backend is ended after the run. The invariant is an
``async (db, outcomes) -> bool | None``: False or a failed ``assert`` in it breaks it.
An interleaving that asks a blocked session for its next step is invalid (skipped and
counted), as in ``locklab explore``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import asyncpg

from lab.core.steps import Session
from lab.errors import LabError
from lab.gate.actors import Actor, Call
from lab.gate.explore import Exploration, explore
from lab.gate.workspace import RedisPlan
from lab.pinned import PinnedDatabase, watch_pool
from lab.pinned.cast import InvalidPermutation
from lab.pinned.permutations import count_interleavings, interleavings
from lab.pinned.permutations import prefixed as _prefixed
from lab.pinned.sequencer import Sequencer

SessionCode = Callable[[Session], Awaitable[str]]
Setup = Callable[[asyncpg.Pool], Awaitable[None]]
Invariant = Callable[[asyncpg.Pool, Mapping[str, str]], Awaitable[bool | None]]


@dataclass
class ScheduleResult:
    """One run: each session's outcome (its returned word, or the SQLSTATE it raised)."""

    schedule: tuple[str, ...]
    outcomes: dict[str, str] = field(default_factory=dict)
    transcript: str = ""
    kept: bool = True  # the invariant held (True when none was given)
    broken: str = ""  # how the invariant broke ("" when it held)
    invalid: str = ""  # why the interleaving was invalid ("" when it ran)
    invalid_at: int = -1  # the schedule item that made it invalid

    def describe(self) -> str:
        return ", ".join(self.schedule)


@dataclass
class Interleavings:
    """Every interleaving's result, in the order they ran (invalid ones included)."""

    steps: dict[str, tuple[str, ...]]
    results: list[ScheduleResult] = field(default_factory=list)
    pruned: int = 0  # interleavings skipped because they start like an invalid one

    def __iter__(self) -> Iterator[ScheduleResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    @property
    def ran(self) -> list[ScheduleResult]:
        return [r for r in self.results if not r.invalid]

    @property
    def broken(self) -> list[ScheduleResult]:
        return [r for r in self.ran if not r.kept]

    @property
    def invalid(self) -> int:
        return self.pruned + sum(1 for r in self.results if r.invalid)

    def summary(self) -> str:
        total = count_interleavings(self.steps)
        return (
            f"kept {len(self.ran) - len(self.broken)}/{len(self.ran)}, broke "
            f"{len(self.broken)} (invalid {self.invalid} of {total})"
        )

    def assert_kept(self) -> None:
        """Fail, naming the first interleaving that broke the invariant, with its transcript."""
        __tracebackhide__ = True  # pytest shows the user's line, not this one
        if not self.ran:
            raise AssertionError(f"no interleaving ran: {self.summary()}")
        if not self.broken:
            return
        first = self.broken[0]
        raise AssertionError(
            f"the invariant broke in {len(self.broken)} of {len(self.ran)} interleavings "
            f"({self.summary()}); first: {first.describe()}: {first.broken}\n{first.transcript}"
        )


class _Runner(PinnedDatabase):
    """One database, reset before every run (as for ``locklab explore``); `pool` observes
    the server for the sequencer. Every run's sessions are ended after it: a user's code may
    leave session state (a SET, a session advisory lock) that must not reach the next run."""

    def __init__(
        self, dsn: str, pool: asyncpg.Pool, setup: Setup | None, schema: Setup | None = None
    ) -> None:
        super().__init__("locklab/testing", dsn, pool)
        self.setup = setup
        self.schema = schema

    async def run(
        self,
        sessions: Mapping[str, SessionCode],
        schedule: Sequence[str],
        invariant: Invariant | None,
        header: str,
    ) -> ScheduleResult:
        db, setup, schema = self.pool, self.setup, self.schema
        assert db is not None
        await self.reset(
            None if setup is None else lambda: setup(db),
            None if schema is None else lambda: schema(db),
        )
        res = ScheduleResult(tuple(schedule))
        conns: list[asyncpg.Connection] = []
        try:
            for name in sessions:
                conns.append(await self.session(name))
            seq = Sequencer(
                self.watch or db,
                {n: (c, code) for (n, code), c in zip(sessions.items(), conns, strict=True)},
                label=header,
                header=f"schedule {header}",
            )
            try:
                res.outcomes = await seq.run(schedule)
            except InvalidPermutation as exc:
                res.invalid, res.invalid_at = exc.why, exc.at
                res.transcript = seq.transcript.text()
                return res
            if invariant is not None:
                res.kept, res.broken = await _judge(invariant, db, res.outcomes)
                seq.transcript.add(
                    "invariant", res.broken or "held", "BROKEN" if res.broken else "held"
                )
            res.transcript = seq.transcript.text()
            return res
        finally:
            await self.end_sessions(conns)  # no lock of this run outlives it


async def _judge(
    invariant: Invariant, db: asyncpg.Pool, outcomes: Mapping[str, str]
) -> tuple[bool, str]:
    name = getattr(invariant, "__name__", "invariant")
    try:
        ok = await invariant(db, dict(outcomes))
    except AssertionError as exc:
        why = " ".join(str(exc).split()) or "assert failed"
        return False, f"{name}: {why}"
    if ok is False:
        return False, f"{name} returned False"
    return True, ""


@asynccontextmanager
async def _runner(
    dsn: str, setup: Setup | None, schema: Setup | None = None
) -> AsyncIterator[_Runner]:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=3)
    runner = _Runner(dsn, pool, setup, schema)
    try:
        runner.watch = await watch_pool(dsn)
        yield runner
    finally:
        for p in (runner.watch, pool):
            if p is not None:
                with contextlib.suppress(Exception):
                    await p.close()


async def run_schedule(
    dsn: str,
    setup: Setup | None,
    sessions: Mapping[str, SessionCode],
    schedule: Sequence[str],
    invariant: Invariant | None = None,
) -> ScheduleResult:
    """Run `sessions` (name -> coroutine function) granting their steps in `schedule`'s
    order (``"s1 read"``, ``"s2 read"``, ...), then check `invariant`."""
    async with _runner(dsn, setup) as runner:
        return await runner.run(sessions, list(schedule), invariant, "given")


async def every_interleaving(
    dsn: str,
    setup: Setup | None,
    sessions: Mapping[str, SessionCode],
    steps: Mapping[str, Sequence[str]],
    invariant: Invariant | None = None,
    schema: Setup | None = None,
) -> Interleavings:
    """Run `sessions` under every interleaving of their `steps` (name -> the steps that
    session takes, in order); each run's result, invalid ones included. With `schema`
    (the DDL apart from `setup`'s rows) the tables are made once and emptied between runs."""
    missing = set(sessions) ^ set(steps)
    if missing:
        raise ValueError(f"sessions and steps name different sessions: {sorted(missing)}")
    out = Interleavings({n: tuple(s) for n, s in steps.items()})
    dead: list[tuple[str, ...]] = []  # beginnings known to be invalid
    async with _runner(dsn, setup, schema) as runner:
        for sched in interleavings(out.steps):
            if _prefixed(sched, dead):
                out.pruned += 1
                continue
            res = await runner.run(sessions, sched, invariant, ", ".join(sched))
            if res.invalid:
                dead.append(tuple(sched[: res.invalid_at + 1]))
            out.results.append(res)
    return out


async def explore_functions(
    dsn: str,
    functions: Sequence[Call],
    setup: str = "",
    invariant: str = "SELECT true",
    *,
    first: bool = True,
    all_orders: bool = False,
    max_orders: int | None = None,
    redis: RedisPlan | None = None,
) -> Exploration:
    """Unchanged Python functions as actors through the gate (``locklab explore --actor``'s
    engine, docs/gate.md): each gets a DSN of its own port (asyncpg, psycopg, SQLAlchemy
    take it as it is), sync or async, no step names. Every order of their statements on
    a fresh copy of `setup` (SQL), judged by `invariant` (SQL returning one boolean row)
    and by whether each function returned; by default it stops at the first broken order,
    the counterexample a test wants. With `redis` (a Redis of the test's own: it is
    emptied before every order), a function that takes a second argument gets a Redis
    URL of its own port of the Redis gate, and its commands are steps too."""
    actors = [Actor.of(number, call) for number, call in enumerate(functions, 1)]
    if len(actors) < 2:
        raise LabError("explore_functions needs at least two functions: an order needs two")
    return await explore(
        dsn,
        actors,
        setup,
        invariant,
        first=first,
        all_orders=all_orders,
        max_orders=max_orders,
        redis=redis,
    )


def assert_kept(found: Exploration) -> None:
    """Fail with the first broken order's transcript, if any order broke."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this helper's
    if not found.broke:
        return
    order = found.broke[0]
    head = f"broke in {len(found.broke)} of {len(found.orders)} orders"
    if found.stopped:
        head += f" ({found.stopped})"
    lines = [f"{head}; the first: {order.outcome()}, invariant read {order.invariant}"]
    lines += order.run.transcript
    lines += [text.strip() for text in order.run.output.values() if text.strip()]
    raise AssertionError("\n".join(lines))


class LocklabInterleavings:
    """The ``locklab_interleavings`` fixture: the helpers bound to this test's database."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def run(
        self,
        setup: Setup | None,
        sessions: Mapping[str, SessionCode],
        schedule: Sequence[str],
        invariant: Invariant | None = None,
    ) -> ScheduleResult:
        return await run_schedule(self.dsn, setup, sessions, schedule, invariant)

    async def every(
        self,
        setup: Setup | None,
        sessions: Mapping[str, SessionCode],
        steps: Mapping[str, Sequence[str]],
        invariant: Invariant | None = None,
        schema: Setup | None = None,
    ) -> Interleavings:
        return await every_interleaving(self.dsn, setup, sessions, steps, invariant, schema)

    async def unchanged(
        self,
        functions: Sequence[Call],
        setup: str = "",
        invariant: str = "SELECT true",
        *,
        first: bool = True,
    ) -> Exploration:
        return await explore_functions(self.dsn, functions, setup, invariant, first=first)
