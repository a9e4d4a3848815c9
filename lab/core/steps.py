"""Session code with named step points: one definition, run as a load or pinned to a schedule.

A scenario's session code is ordinary async Python on a ``Session``::

    async def buyer(env: Env, s: Session) -> str:
        async with s.transaction(isolation=env.params["isolation"]):
            row = await s.fetchrow("read", "SELECT stock FROM inventory WHERE id = $1", 1)
            await s.execute("write", "UPDATE inventory SET stock = $1 WHERE id = $2", ..., 1)
        return "ok"

Every statement is a named step; the transaction's COMMIT is the step ``commit``. Two
modes, one code path:

* LOAD (``locklab run -n N``): no sequencer. A step stamps the time and calls asyncpg.
* PINNED (``trace``, ``explore``): a ``lab.pinned.sequencer.Sequencer`` grants each step in the
  order of a schedule and records what the server answered.

A scenario declares its sessions' steps and its schedules in a ``Pinned``.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import asyncpg

if TYPE_CHECKING:
    from lab.core.env import Actor, Env

ISOLATION_LEVELS = ("read_committed", "repeatable_read", "serializable")


class Gate(Protocol):
    """What a pinned session reports to: the sequencer's side of a step."""

    async def ask(self, session: Session, step: str, shown: str) -> None: ...

    def finished(self, session: Session, step: str, result: str) -> None: ...

    def failed(self, session: Session, step: str, exc: BaseException) -> None: ...

    def waiting(
        self, session: Session, predicate: Callable[[], Awaitable[bool]] | None
    ) -> None: ...


class Backend(Protocol):
    """What the harness asks of a session's connection: its backend's pid, and to drop it.
    An asyncpg connection is one; so is the spec runner's own wire connection."""

    def get_server_pid(self) -> int: ...

    def terminate(self) -> None: ...


class Session:
    """One actor's connection, its name (``s1``, ``s2``) and its step points."""

    def __init__(
        self, name: str, conn: Backend | None, index: int, gate: Gate | None = None
    ) -> None:
        self.name = name
        self.backend = conn  # None: a session run in a worker process, or a test's
        self.index = index  # 0-based: the role a session plays (cart order, ...)
        self.gate = gate  # None: LOAD mode
        self.stamps: list[tuple[str, float]] = []  # (step, perf_counter) in LOAD mode
        self.pinned = gate is not None  # under a schedule (also inside one granted step)

    @property
    def conn(self) -> asyncpg.Connection:
        """The connection the session's code runs its SQL on: an asyncpg connection, a
        pool's proxy, or the tx-pool's (lab/load/txpool.py), which speaks asyncpg's API;
        a TypeError names the session when it has none (a worker process's, a test's)."""
        if self.backend is None:
            raise TypeError(f"session {self.name}: no connection to run SQL on")
        return cast("asyncpg.Connection", self.backend)

    async def step(
        self,
        name: str,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        shown: str = "",
        result: Callable[[Any], str] = str,
        waits: Callable[[], Awaitable[bool]] | None = None,
    ) -> Any:
        """Run `fn(*args)` as the step `name`.

        `shown` is what a transcript prints for it (the SQL or Redis command), `result`
        renders its return value. `waits`, for a step that can wait outside PostgreSQL (a
        Redis poll loop), tells the sequencer whether the session is waiting right now.
        """
        gate = self.gate
        if gate is None:
            self.stamps.append((name, time.perf_counter()))
            return await fn(*args)
        await gate.ask(self, name, shown)
        gate.waiting(self, waits)
        try:
            value = await fn(*args)
        except BaseException as exc:
            gate.failed(self, name, exc)
            raise
        gate.finished(self, name, result(value))
        return value

    async def execute(self, name: str, sql: str, *args: Any) -> str:
        """A statement's status (``UPDATE 1``), as the step `name`."""
        if self.gate is None:
            self.stamps.append((name, time.perf_counter()))
            return str(await self.conn.execute(sql, *args))
        return str(await self.step(name, self.conn.execute, sql, *args, shown=show_sql(sql, args)))

    async def fetchrow(self, name: str, sql: str, *args: Any) -> asyncpg.Record | None:
        """The first row, or None, as the step `name`."""
        if self.gate is None:
            self.stamps.append((name, time.perf_counter()))
            return await self.conn.fetchrow(sql, *args)
        row: asyncpg.Record | None = await self.step(
            name, self.conn.fetchrow, sql, *args, shown=show_sql(sql, args), result=show_row
        )
        return row

    async def fetchval(self, name: str, sql: str, *args: Any) -> Any:
        """The first column of the first row (None without a row), as the step `name`."""
        row = await self.fetchrow(name, sql, *args)
        return None if row is None else row[0]

    async def fetch(self, name: str, sql: str, *args: Any) -> list[asyncpg.Record]:
        """Every row, as the step `name`."""
        if self.gate is None:
            self.stamps.append((name, time.perf_counter()))
            return list(await self.conn.fetch(sql, *args))
        rows: list[asyncpg.Record] = await self.step(
            name, self.conn.fetch, sql, *args, shown=show_sql(sql, args), result=show_rows
        )
        return rows

    async def other_logic(self, seconds: float) -> None:
        """The application's own work between two steps, where time is the subject of a
        load (the document's "5 ms of other logic"). Pinned, the schedule decides what
        runs when, so it takes no time."""
        if not self.pinned and seconds > 0:
            await asyncio.sleep(seconds)

    def inside_step(self) -> Session:
        """This session for code that runs inside one granted step (a retried transaction
        as the single step `retry`): its step points are not granted, only stamped, and
        pinned its other_logic still takes no time."""
        inner = Session(self.name, self.backend, self.index)
        inner.pinned = self.pinned
        return inner

    @asynccontextmanager
    async def transaction(
        self, isolation: str = "read_committed", commit: str = "commit"
    ) -> AsyncIterator[None]:
        """BEGIN (not a step: it takes no lock), the body, then COMMIT as the step `commit`
        (a session with two transactions names the second one's); ROLLBACK when the body
        raises."""
        tx = self.conn.transaction(isolation=isolation)  # type: ignore[arg-type]
        await tx.start()
        try:
            yield
        except BaseException:
            if not self.conn.is_closed():
                await tx.rollback()
            raise
        try:
            await self.step(commit, tx.commit, shown="COMMIT", result=lambda _: "COMMIT")
        except BaseException:  # a run ended before its commit was granted
            if not self.conn.is_closed() and self.conn.is_in_transaction():
                await tx.rollback()
            raise


SessionCode = Callable[["Env", Session], Awaitable[str]]


def as_actor(code: SessionCode) -> Actor:
    """The harness's actor for `code` in LOAD mode: actor i is session ``s<i+1>``."""

    async def actor(env: Env, conn: asyncpg.Connection | None, i: int) -> str:
        assert conn is not None, f"{env.scenario}: session code needs a connection"
        return await code(env, Session(f"s{i + 1}", conn, i))

    actor.__name__ = actor.__qualname__ = getattr(code, "__name__", "actor")
    actor.__doc__ = code.__doc__
    return actor


@dataclass(frozen=True)
class Pinned:
    """A scenario's sessions pinned to schedules: their code, steps and canonical orders.

    `code` is each variant's session code (every session runs it; `Session.index` picks a
    role). `steps[variant][session]` lists the steps that session takes, in its order;
    `schedules[variant][name]` is a canonical order, e.g. ``("s1 read", "s2 read", ...)``.
    `isolation` is the axis explore covers by default (the scenario's ``isolation`` param).
    """

    code: Mapping[str, SessionCode]
    steps: Mapping[str, Mapping[str, tuple[str, ...]]]
    schedules: Mapping[str, Mapping[str, tuple[str, ...]]]
    sessions: tuple[str, ...] = ("s1", "s2")
    isolation: tuple[str, ...] = ("read_committed",)
    explore: tuple[str, ...] = ()  # variants explore covers by default (empty: all)
    notes: Mapping[str, str] = field(default_factory=dict)  # schedule name -> one line
    # param overrides for pinned runs only (e.g. a lease long enough that no schedule
    # outlasts it, where a load keeps a short one to show the expiry)
    params: Mapping[str, Any] = field(default_factory=dict)
    # explore runs the canonical schedules only: for sessions whose other orders are too
    # many to run (nine sessions) or say nothing the canonical ones do not
    canonical_only: bool = False
    # per variant, steps ("s2 ask-row") that, once the server shows them blocked, end by
    # themselves (a lock_timeout or statement_timeout fires): in every schedule, explored
    # ones included, the sequencer waits for their end before the next item, as for a
    # step marked (*), so that no other step's duration decides what ends first
    ends_by_itself: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Code mutants explored as a claim's counterfactual only (lab.core.mutants): name ->
    # (session code, its sessions' steps). Apart from `code` and `steps`: `explore` and
    # `trace` never run them unless a counterfactual names one (Scenario.mutants).
    mutants: Mapping[str, tuple[SessionCode, Mapping[str, tuple[str, ...]]]] = field(
        default_factory=dict
    )
    # A mutant's canonical schedules, by its name, as `schedules` are a variant's: what an
    # explore runs as its canonical runs (with `canonical_only`, the only runs it makes).
    mutant_schedules: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)

    def code_of(self, variant: str) -> SessionCode:
        """A variant's session code, or a mutant's."""
        return self.code[variant] if variant in self.code else self.mutants[variant][0]

    def steps_of(self, variant: str) -> Mapping[str, tuple[str, ...]]:
        """A variant's sessions' steps, or a mutant's."""
        return self.steps[variant] if variant in self.steps else self.mutants[variant][1]

    def schedules_of(self, variant: str) -> Mapping[str, tuple[str, ...]]:
        """A variant's canonical schedules, or a mutant's (none declared: none)."""
        if variant in self.schedules:
            return self.schedules[variant]
        return self.mutant_schedules.get(variant, {})

    def actors(self) -> dict[str, Actor]:
        """The variants as load actors (Scenario.variants)."""
        return {v: as_actor(c) for v, c in self.code.items()}

    def explored(self) -> tuple[str, ...]:
        return self.explore or tuple(self.code)


ON_ITS_OWN = "(*)"  # a schedule item's mark: the step waits and ends by itself


def parse_step(item: str) -> tuple[str, str]:
    """``"s1 read"`` -> ``("s1", "read")``; ``"s2 alter(*)"`` -> ``("s2", "alter")``."""
    who, _, step = item.strip().partition(" ")
    return who, step.strip().removesuffix(ON_ITS_OWN).rstrip()


def schedule(text: str) -> tuple[str, ...]:
    """A schedule written as `--schedule` takes it: ``"s1 read, s2 read, s1 commit"`` ->
    ``("s1 read", "s2 read", "s1 commit")``. One line of steps reads as the order it is."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def on_its_own(item: str) -> bool:
    """Whether a schedule item is marked ``(*)``, as in the isolation tester: the step
    blocks and ends without another grant (a lock_timeout or statement_timeout fires).
    It prints ``<waiting ...>`` as soon as it is granted, and the schedule goes on only
    once it has ended, with its ``<... completed>`` line: the same text whether or not
    the server was seen reporting it blocked before it ended."""
    return item.strip().endswith(ON_ITS_OWN)


# --- how a step is shown ----------------------------------------------------------------


def literal(value: Any) -> str:
    """A parameter as SQL would spell it: 'A-1', 3, NULL, '{A-1,B-2}'."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "'{" + ",".join(str(v) for v in value) + "}'"
    return "'" + str(value).replace("'", "''") + "'"


def show_sql(sql: str, args: Sequence[Any]) -> str:
    """The statement on one line, its $n parameters written in."""
    one = " ".join(sql.split())
    return re.sub(
        r"\$(\d+)", lambda m: literal(args[int(m[1]) - 1]) if int(m[1]) <= len(args) else m[0], one
    )


def show_row(row: Mapping[str, Any] | None) -> str:
    if row is None:
        return "(no row)"
    return " ".join(f"{k}={v}" for k, v in row.items())


def show_ids(rows: Sequence[asyncpg.Record | Mapping[str, Any]]) -> str:
    """Rows by their sorted ids, a run of more than four shortened: [1001, 1002, 1003 ... 1010]."""
    got = sorted(r["id"] for r in rows)
    if len(got) > 4 and got == list(range(got[0], got[-1] + 1)):
        return f"[{got[0]}, {got[1]}, {got[2]} ... {got[-1]}]"
    return "[" + ", ".join(map(str, got)) + "]"


def show_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    return f"{len(rows)} row{'s' if len(rows) != 1 else ''}" + "".join(
        f"; {show_row(r)}" for r in rows
    )
