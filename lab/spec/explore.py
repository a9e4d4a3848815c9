"""``locklab explore FILE.spec``: every interleaving of a spec's steps (its permutation
lines aside), at each isolation level the spec leaves open, and what each did.

Each permutation runs on the lab's one ordering engine, lab/pinned/sequencer.py, as the
scenarios' interleavings do: a session is the spec's steps it takes in that permutation,
each a step of the schedule; the sequencer grants them in order and moves on when every
session has asked for its next, ended, or is blocked as the server reports it (the
isolation tester's own pg_isolation_test_session_is_blocked). A step that fails does not
end its session (the tester's way): its SQLSTATE is kept and the session goes on. A
session whose steps are done keeps its transaction (the sequencer's `persist`), so a
step that comes due on a session still waiting on a lock, while another session could
move, makes the permutation invalid (skipped and counted), as in the tester before
PostgreSQL 14. A permutation ends *ok* (no step failed), with errors (the SQLSTATEs of
the steps that failed: s2 u2 40P01), *gave up* (a failed setup, a step that neither
ended nor blocked within the tester's own limit, lab/spec/run.step_wait_s) or *invalid*.
Permutations with the same ending form one outcome; the first of each is kept with its
transcript. (`locklab trace FILE.spec` prints the tester's own text byte for byte, on the
same sequencer: lab/spec/run.py.)

The isolation axis: the spec's connections log in with ``default_transaction_isolation``
at each level, unless the spec sets one itself (``ISOLATION LEVEL``, ``SET TRANSACTION``,
``default_transaction_isolation`` in its text): then once, at the server's default.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from lab.core.steps import Session, show_sql
from lab.errors import LabError, ScenarioFailure
from lab.pinned.cast import InvalidPermutation
from lab.pinned.rules import RESOLVE_S, Rules
from lab.pinned.sequencer import Sequencer
from lab.spec.databases import Databases
from lab.spec.parse import PermutationStep, Spec, SpecError, read_spec
from lab.spec.run import all_permutations, step_wait_s

LEVELS = ("read committed", "repeatable read", "serializable")
OWN_LEVEL = re.compile(
    r"\bisolation\s+level\b|\bset\s+transaction\b|\bdefault_transaction_isolation\b", re.I
)
MAX_PERMUTATIONS = 2000  # more than this is refused (the count grows as a multinomial)


class StuckTeardown(LabError):
    """A teardown waited past the tester's limit after a permutation: the spec leaves a
    transaction open, and every permutation would wait the same (the tester hangs)."""


@dataclass
class Outcome:
    ending: str  # "ok", "s2 u2 40P01, s1 c1 40001", "gave up", "invalid"
    count: int = 0
    first: str = ""  # the first such permutation's steps
    text: str = ""  # what it printed


@dataclass
class LevelResult:
    level: str  # an isolation level, or "the spec's own"
    permutations: int = 0
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    def count(self, ending: str) -> int:
        return self.outcomes[ending].count if ending in self.outcomes else 0

    def cell(self) -> str:
        """One cell of the table: ok n/m, each SQLSTATE's count, gave up, invalid."""
        valid = self.permutations - self.count("invalid")
        parts = [f"ok {self.count('ok')}/{valid}"]
        states: dict[str, int] = {}
        for ending, o in self.outcomes.items():
            for word in re.findall(r"\b[0-9A-Z]{5}\b", ending):
                states[word] = states.get(word, 0) + o.count
        parts += [f"{code} in {n}" for code, n in sorted(states.items())]
        if self.count("gave up"):
            parts.append(f"gave up {self.count('gave up')}")
        if self.count("invalid"):
            parts.append(f"(invalid {self.count('invalid')} of {self.permutations})")
        return ", ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "level": self.level,
            "permutations": self.permutations,
            "outcomes": [vars(o) for o in self.outcomes.values()],
        }


def levels_for(spec_text: str, asked: str | None) -> list[str]:
    """The isolation levels to run: those asked (a comma list), or every level; only the
    spec's own when it sets one (asking for a level then is refused)."""
    own = OWN_LEVEL.search(spec_text) is not None
    if asked is None:
        return ["the spec's own"] if own else list(LEVELS)
    levels = [word.strip().replace("_", " ").lower() for word in asked.split(",")]
    bad = [w for w in levels if w not in LEVELS]
    if bad or not levels:
        raise LabError(
            f"--isolation {asked!r}: expected read_committed, repeatable_read, serializable"
        )
    if own:
        raise LabError("--isolation: this spec sets its own isolation level")
    return list(dict.fromkeys(levels))


def session_of(spec: Spec, step: str) -> str:
    return spec.sessions[spec.step(step).session].name


IS_BLOCKED = "SELECT pg_catalog.pg_isolation_test_session_is_blocked($1, $2)"
# A step on a connection the server had already ended (while idle): asyncpg drops the
# server's FATAL and says "connection is closed"; libpq would still read it (57P01 after a
# pg_terminate_backend). The step was never sent: SQLSTATE connection_does_not_exist.
CONNECTION_GONE = "08003"


def sqlstate(exc: asyncpg.PostgresError) -> str:
    """The server's SQLSTATE: for a connection ended mid-step, the FATAL it sent first
    (57P01 after a pg_terminate_backend), which asyncpg keeps as the cause of its 08003."""
    cause = exc.__cause__
    if isinstance(cause, asyncpg.PostgresError) and cause.sqlstate:
        return str(cause.sqlstate)
    return str(exc.sqlstate)


class _Explorer:
    """One level's permutations on one database: a control connection and one per session,
    kept from one permutation to the next (as the tester keeps them)."""

    def __init__(
        self, spec: Spec, dsn: str, dbs: Databases, database: str, startup: dict[str, str]
    ) -> None:
        self.spec, self.dsn, self.dbs, self.database = spec, dsn, dbs, database
        self.startup = startup
        self.control: asyncpg.Connection | None = None
        self.limit = step_wait_s()  # the tester's, for the server's version at connect
        self.conns: dict[str, asyncpg.Connection] = {}

    async def connect(self) -> None:
        async def one(name: str) -> asyncpg.Connection:
            settings = {**self.startup, "application_name": f"locklab explore/{name}"}
            conn: asyncpg.Connection = await asyncpg.connect(
                self.dsn, database=self.database, server_settings=settings
            )
            return conn

        self.control = await one("control connection")
        # a step that neither ends nor blocks within the tester's own limit: gave up
        self.limit = step_wait_s(self.control.get_server_version().major)
        self.conns = {sess.name: await one(sess.name) for sess in self.spec.sessions}

    async def close(self) -> None:
        for conn in [self.control, *self.conns.values()]:
            if conn is not None and not conn.is_closed():
                conn.terminate()
        self.control, self.conns = None, {}

    async def permutation(self, steps: list[PermutationStep]) -> tuple[str, str]:
        """(its ending, its transcript)."""
        if self.control is None:
            await self.connect()
        control = self.control
        assert control is not None
        spec, failed = self.spec, []
        try:
            for sql in spec.setups:
                await control.execute(sql)
            for sess in spec.sessions:
                if sess.setup is not None:
                    await self.conns[sess.name].execute(sess.setup)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            await self._start_again()
            return "gave up", f"setup failed: {exc}\n"
        pids = [c.get_server_pid() for c in self.conns.values()]

        def code_of(session: str) -> Callable[[Session], Awaitable[str]]:
            mine = [ps.name for ps in steps if session_of(spec, ps.name) == session]

            async def code(s: Session) -> str:
                pid = s.conn.get_server_pid()

                async def waits() -> bool:  # the tester's own test
                    return bool(await control.fetchval(IS_BLOCKED, pid, pids))

                for name in mine:
                    sql = spec.step(name).sql
                    try:
                        await s.step(
                            name, s.conn.execute, sql, shown=show_sql(sql, ()), waits=waits
                        )
                    except asyncpg.PostgresError as exc:  # the session goes on, as the tester's
                        failed.append(f"{session} {name} {sqlstate(exc)}")
                    except asyncpg.InterfaceError:  # its connection is gone (terminated)
                        failed.append(f"{session} {name} {CONNECTION_GONE}")
                return "done"

            return code

        sessions = {name: (conn, code_of(name)) for name, conn in self.conns.items()}
        limit = self.limit
        seq = Sequencer(
            control,
            sessions,
            label=f"{spec.sessions[0].name}.. explore",
            # a spec's session keeps its transaction after its last step
            rules=Rules(timeout=limit, resolve_timeout=max(RESOLVE_S, limit), persist=True),
        )
        schedule = [f"{session_of(spec, ps.name)} {ps.name}" for ps in steps]
        try:
            await seq.run(schedule)
        except InvalidPermutation as exc:
            seq.transcript.add(schedule[exc.at], "", f"(invalid permutation: {exc.why})")
            await self._clean_up(steps)
            return "invalid", seq.transcript.text()
        except ScenarioFailure as exc:  # a step that neither ended nor blocked
            seq.transcript.add("explore", "", f"(gave up: {exc})")
            await self._start_again()
            return "gave up", seq.transcript.text()
        await self._teardown(steps)
        if any(c.is_closed() for c in self.conns.values()):  # a session the spec ended
            await self._start_again()
        return (", ".join(failed) if failed else "ok"), seq.transcript.text()

    async def _teardown(self, steps: list[PermutationStep]) -> None:
        """The sessions' teardowns and the spec's, after the permutation `steps`; one that
        fails is skipped (as the tester says so and goes on). One that waits past the
        step limit (asyncpg cancels it) waits on a lock no step will release:
        StuckTeardown."""
        try:
            for sess in self.spec.sessions:
                if sess.teardown is not None:
                    await _skip_failure(
                        self.conns[sess.name].execute(sess.teardown, timeout=self.limit)
                    )
            if self.spec.teardown is not None and self.control is not None:
                await _skip_failure(self.control.execute(self.spec.teardown, timeout=self.limit))
        except TimeoutError:
            names = " ".join(ps.name for ps in steps)
            raise StuckTeardown(
                f"teardown did not finish in {self.limit:g} s after permutation {names} (a "
                "session's transaction is still open after its last step)"
            ) from None

    async def _clean_up(self, steps: list[PermutationStep]) -> None:
        """After an invalid permutation: every session rolled back, the teardowns; a fresh
        database if a session's connection did not survive the sequencer's abort."""
        if any(c.is_closed() for c in self.conns.values()):
            await self._start_again()
            return
        try:
            for conn in self.conns.values():
                await conn.execute("ROLLBACK")
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            await self._start_again()
            return
        await self._teardown(steps)

    async def _start_again(self) -> None:
        """Sessions mid-step, no teardown ran: a clean database and new connections."""
        await self.close()
        await asyncio.to_thread(self.dbs.remake, self.database)


async def _skip_failure(sql: Awaitable[object]) -> None:
    """Await a teardown's SQL; one that fails is skipped. Past its timeout, TimeoutError
    (an OSError too, so caught before the OSError a lost connection raises)."""
    try:
        await sql
    except TimeoutError:
        raise
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
        pass


def explore_spec(
    path: Path, dsn: str, isolation: str | None = None, deadlock_ms: int | None = None
) -> list[LevelResult]:
    """Every interleaving of the spec at `path`, at each level; a database of its own.
    `deadlock_ms`: the sessions' deadlock_timeout (else the server's, or the spec's own)."""
    spec = read_spec(path)
    levels = levels_for(path.read_text(errors="replace"), isolation)
    perms = all_permutations(spec)
    if len(perms) > MAX_PERMUTATIONS:
        raise LabError(
            f"{path}: {len(perms)} interleavings, more than explore runs ({MAX_PERMUTATIONS})"
        )
    dbs = Databases(dsn)
    results = []
    try:
        database = dbs.make(f"locklab_explore_{secrets.token_hex(4)}")
        for level in levels:
            res = LevelResult(level, len(perms))
            startup = {} if level not in LEVELS else {"default_transaction_isolation": level}
            if deadlock_ms is not None:
                startup["deadlock_timeout"] = f"{deadlock_ms}ms"
            try:
                asyncio.run(_level(_Explorer(spec, dsn, dbs, database, startup), perms, res))
            except StuckTeardown as exc:
                raise SpecError(f"{path}: {exc}") from None
            results.append(res)
    finally:
        dbs.close()
    return results


async def _level(explorer: _Explorer, perms: list[list[PermutationStep]], res: LevelResult) -> None:
    try:
        for steps in perms:
            ending, text = await explorer.permutation(steps)
            o = res.outcomes.setdefault(ending, Outcome(ending))
            if not o.count:
                o.first, o.text = " ".join(ps.name for ps in steps), text
            o.count += 1
    finally:
        await explorer.close()


def table_lines(path: Path, results: list[LevelResult]) -> list[str]:
    """The table (one line per level), then each outcome with its first permutation."""
    width = max(len(r.level) for r in results)
    lines = [f"{path.name}: every interleaving ({results[0].permutations} permutations)"]
    lines += [f"  {r.level:<{width}}  {r.cell()}" for r in results]
    for r in results:
        lines.append("")
        lines.append(f"{r.level}:")
        for o in sorted(r.outcomes.values(), key=lambda o: -o.count):
            lines.append(f"  {o.count:>4}  {o.ending:<40}  first: {o.first}")
    return lines
