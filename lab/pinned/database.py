"""One database for a whole pinned command: reset before each run, a fresh connection per session."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import asyncpg

from lab.core.scenario import Env, Observer, Scenario, start_observers, stop_observers
from lab.errors import ScenarioFailure
from lab.load.databases import (
    GONE,
    admin_connect,
    create_statement,
    database_name,
    probe_pg,
    set_deadlock_timeout,
)
from lab.load.redisclients import redis_client
from lab.pinned.cast import InvalidPermutation
from lab.pinned.fastreset import Baseline, baseline, fast_reset
from lab.pinned.footprint import StepPrints
from lab.pinned.rules import RESOLVE_S, Rules
from lab.pinned.schedules import PinnedResult, pinned_of
from lab.pinned.sequencer import Sequencer
from lab.pinned.stage import STEP_S, Staged
from lab.servers import Servers
from lab.servers.base import with_database

# --- one database for a command ----------------------------------------------------------


async def _read_only(conn: asyncpg.Connection) -> None:
    """The watch pool's reset: its queries change no session state, so nothing to undo."""


async def watch_pool(dsn: str) -> asyncpg.Pool:
    """A small pool for the sequencer's looks at the server (read-only queries)."""
    pool: asyncpg.Pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2, reset=_read_only)
    return pool


class PinnedDatabase:
    """One database for pinned runs: reset before every run (the public schema dropped, the
    run's Redis keys deleted, then the caller's setup), and the sessions' connections, kept
    for the next run after a clean one or ended, their backends waited for. PinnedLab runs a
    scenario's sessions on it; lab/testing.py a user's own coroutines."""

    def __init__(self, app: str, dsn: str = "", pool: asyncpg.Pool | None = None) -> None:
        self.app = app  # the sessions' application_name, before "/<session>"
        self.dsn = dsn
        self.pool = pool
        # the sequencer's look at pg_stat_activity / pg_locks, many times a step: read-only,
        # so its pool skips asyncpg's reset query (a round trip) on every release
        self.watch: asyncpg.Pool | None = None
        self.redis: Any = None
        self.prefix = ""  # the run's Redis keys (with a client in `redis`)
        self._idle: list[asyncpg.Connection] = []  # session connections free for a run
        self._all: list[asyncpg.Connection] = []
        self._pids: dict[int, int] = {}  # id(connection) -> its backend's pid
        self._base: Baseline | None = None  # public right after the schema ran (fast reset)
        self.full_resets = 0  # resets that dropped public and ran the schema again
        self.fast_resets = 0  # resets that emptied the tables back to the schema's state
        self.slow_why = ""  # why the schema's database cannot take the fast path ("" if it can)

    async def reset(
        self,
        setup: Callable[[], Awaitable[object]] | None = None,
        schema: Callable[[], Awaitable[object]] | None = None,
        key: str = "",
    ) -> None:
        """Drop what the last run made, then run `schema` and `setup`. With a `schema`, a
        database whose public schema is still as `schema` (run for the same `key`) left it
        is only emptied back to that state (lab/pinned/fastreset.py); otherwise public is dropped
        and made again."""
        assert self.pool is not None
        base, self._base = self._base, None  # a reset that fails leaves the full path next
        fast = False
        # the watch pool: a reset leaves no session state (its SET is LOCAL), so the round
        # trip of the main pool's reset-on-release buys nothing
        tables = self.watch or self.pool
        if schema is not None and base is not None and base.key == key:
            async with tables.acquire() as conn:
                fast = await fast_reset(conn, base)
        if fast:
            self.fast_resets += 1
        else:
            self.full_resets += 1
            await self.pool.execute("DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public")
            base = None
            if schema is not None:
                await schema()
                async with tables.acquire() as conn:
                    got = await baseline(conn, key)
                base, self.slow_why = (None, got) if isinstance(got, str) else (got, "")
        if self.redis is not None:
            keys = [k async for k in self.redis.scan_iter(match=f"{self.prefix}*", count=1000)]
            if keys:
                await self.redis.delete(*keys)
        if setup is not None:
            await setup()
        self._base = base

    async def session(self, name: str) -> asyncpg.Connection:
        """An idle session connection from an earlier clean run, or a new one."""
        if self._idle:
            return self._idle.pop(0)
        app = f"{self.app}/{name}"[:63]
        conn: asyncpg.Connection = await asyncpg.connect(
            self.dsn, server_settings={"application_name": app}
        )
        self._all.append(conn)
        self._pids[id(conn)] = conn.get_server_pid()
        return conn

    def keep(self, conns: list[asyncpg.Connection]) -> None:
        """Sessions whose code ran to its end (no transaction left): free for the next run."""
        self._idle += conns

    async def end_sessions(self, conns: list[asyncpg.Connection]) -> None:
        """Close the sessions and wait until the server has ended their backends."""
        pids = [self._pids.pop(id(c)) for c in conns if id(c) in self._pids]
        for c in conns:
            if not c.is_closed():
                c.terminate()
        self._all = [c for c in self._all if all(c is not e for e in conns)]
        conns.clear()
        if pids and self.pool is not None:
            await self.pool.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                " WHERE pid = ANY($1::int[])",
                pids,
            )

    def terminate_all(self) -> None:
        """End every session connection at once (the database is about to be dropped)."""
        for conn in self._all:
            conn.terminate()


class PinnedLab(PinnedDatabase):
    """A database for pinned runs of one scenario, reset before every run."""

    def __init__(
        self,
        scenario: Scenario,
        servers: Servers,
        run_id: str,
        deadlock_ms: int,
        lane: str = "",
        params: Mapping[str, Any] | None = None,
    ):
        super().__init__(f"locklab/{scenario.id}/pinned")
        self.scenario = scenario
        self.params = dict(params or {})  # the user's -p, over the pinned story's own
        self.servers = servers
        self.run_id = run_id
        self.deadlock_ms = deadlock_ms
        # `lane`: explores of one scenario side by side each have a database of their own
        self.database = database_name(run_id, scenario.id, f"pinned{lane}")
        self.prefix = f"locklab:{run_id}:pinned{lane}:"

    async def prepare(self, variant: str, isolation: str) -> Env:
        """The run's env, the database reset and set up for it."""
        sc, pinned = self.scenario, pinned_of(self.scenario)
        params = {**sc.params, **pinned.params, **self.params}
        if "isolation" in params:
            params["isolation"] = isolation
        env = Env(
            scenario=sc.id,
            variant=variant,
            dsn=self.dsn,
            database=self.database,
            db=self.pool,
            redis=self.redis,
            prefix=self.prefix,
            params=params,
            seed=1,
            n=len(pinned.sessions),
            redis_url=self.servers.redis.url if self.servers.redis is not None else "",
        )
        setup, schema = sc.setup, sc.schema
        await self.reset(
            None if setup is None else lambda: setup(env),
            None if schema is None else lambda: schema(env),
            key=f"{variant} {sorted(params.items())!r}",  # a new run of the schema for each
        )
        return env

    async def run(
        self,
        variant: str,
        schedule: Sequence[str],
        *,
        isolation: str,
        name: str = "",
        observe: bool = False,
    ) -> PinnedResult:
        """Reset, set up, run the sessions under `schedule`, check the invariants; with
        `observe`, each granted step's footprint too (lab/pinned/footprint.py)."""
        sc, pinned = self.scenario, pinned_of(self.scenario)
        assert self.pool is not None
        env = await self.prepare(variant, isolation)
        res = PinnedResult(variant, tuple(schedule), isolation, name)
        conns: list[asyncpg.Connection] = []
        clean = False
        observed: list[Observer] = []
        try:
            observed = await start_observers(sc.observers, env)
            conns = list(await asyncio.gather(*(self.session(s) for s in pinned.sessions)))
            code = pinned.code_of(variant)

            def bind(c: Any) -> Any:
                return lambda s: c(env, s)

            sessions = {
                s: (conn, bind(code)) for s, conn in zip(pinned.sessions, conns, strict=True)
            }
            seq = self._sequencer(variant, name, isolation, sessions, env, observe)
            try:
                res.outcomes = await seq.run(schedule)
            except InvalidPermutation as exc:
                # the sequencer rolled every session back (or closed its connection)
                clean = not any(c.is_closed() or c.is_in_transaction() for c in conns)
                res.invalid, res.invalid_at = exc.why, exc.at
                seq.transcript.add(schedule[exc.at], "", f"(invalid permutation: {exc.why})")
                res.transcript = seq.transcript.text()
                return res
            finally:
                res.waited = list(seq.waited)
                res.timing = seq.clock.to_json()
                if isinstance(seq.watch, StepPrints):
                    res.footprints = seq.watch.prints
            clean = not any(c.is_closed() or c.is_in_transaction() for c in conns)
            undeclared = set(res.outcomes.values()) - set(sc.outcomes)
            if undeclared:
                raise ScenarioFailure(
                    f"{sc.id} / {variant}: undeclared outcome(s) {sorted(undeclared)} under "
                    f"schedule {', '.join(schedule)}"
                )
            env.outcomes = Counter(res.outcomes.values())
            await stop_observers(observed, env)
            res.checks = await sc.invariant(env) if sc.invariant else []
            res.evidence = dict(env.extra_evidence)
            for c in res.checks:
                seq.transcript.add("invariant", f"{c.name}: {c.detail}", _held(c.held))
            res.transcript = seq.transcript.text()
            return res
        finally:
            if observed:  # the run failed or was invalid: stop what watches it
                with contextlib.suppress(Exception):
                    await stop_observers(observed, env)
            if clean:  # every session's code ran to its end: no transaction left, reuse them
                self.keep(conns)
            else:
                await self.end_sessions(conns)

    def _sequencer(
        self,
        variant: str,
        name: str,
        isolation: str,
        sessions: dict[str, tuple[asyncpg.Connection, Any]],
        env: Env,
        observe: bool,
    ) -> Sequencer:
        """The Sequencer of one run: the scenario's rules, its worker processes if it is a
        cast, and with `observe` the footprints' reader."""
        sc, pinned = self.scenario, pinned_of(self.scenario)
        rules = Rules(
            resolve_timeout=max(RESOLVE_S, 3 * self.deadlock_ms / 1000),
            ends_by_itself=pinned.ends_by_itself.get(variant, frozenset()),
        )
        kw: dict[str, Any] = {}
        if isinstance(pinned, Staged) and pinned.processes is not None:
            # a cast: some sessions in worker processes, with faults (lab/pinned/stage.py)
            kw.update(processes=pinned.processes(env, variant), env=env)
            rules = replace(rules, finish=not name, timeout=STEP_S)
        looks = self.watch or self.pool
        if observe and looks is not None:  # the footprints' reader, on the sessions' conns
            own = {s: conn for s, (conn, _) in sessions.items()}
            kw.update(watch=StepPrints(looks, own))
        return Sequencer(
            looks,
            sessions,
            label=f"{sc.id} / {variant} / {name or 'interleaving'}",
            header=self.header(variant, name or "interleaving", isolation),
            rules=rules,
            **kw,
        )

    def header(self, variant: str, name: str, isolation: str) -> str:
        # deadlock_timeout is not printed: it decides when a cycle is broken, not the
        # order; a transcript is the same at any value long enough for the schedule
        what = f"{self.scenario.id} / {variant}, {isolation.replace('_', ' ')}"
        return f"schedule {name}   ({what})"


def _held(held: bool) -> str:
    return "held" if held else "BROKEN"


@asynccontextmanager
async def pinned_lab(
    scenario: Scenario,
    servers: Servers,
    run_id: str,
    deadlock_ms: int,
    lane: str = "",
    params: Mapping[str, Any] | None = None,
) -> AsyncIterator[PinnedLab]:
    """A fresh database (and Redis prefix) for one trace or explore, dropped afterwards;
    `params` (the user's -p) over the scenario's and its pinned story's own."""
    lab = PinnedLab(scenario, servers, run_id, deadlock_ms, lane, params)
    admin = await admin_connect(servers)
    created = False
    try:
        await probe_pg(admin, servers)
        await admin.execute(create_statement(servers, lab.database))
        created = True
        await set_deadlock_timeout(admin, lab.database, deadlock_ms)
        assert servers.pg is not None
        lab.dsn = with_database(servers.pg.dsn, lab.database)
        lab.pool = await asyncpg.create_pool(lab.dsn, min_size=1, max_size=3)
        lab.watch = await watch_pool(lab.dsn)
        if "redis" in scenario.uses:
            lab.redis = await redis_client(servers, 16)
        yield lab
    finally:
        lab.terminate_all()
        for pool in (lab.pool, lab.watch):
            if pool is not None:
                pool.terminate()
        if lab.redis is not None:
            with contextlib.suppress(Exception):
                await lab.redis.aclose()
        if created:
            with contextlib.suppress(Exception):
                # the backends just closed, waited for until they are gone: DROP DATABASE
                # would otherwise find them still exiting and retry only after 100 ms
                await admin.execute(GONE, lab.database)
            with contextlib.suppress(Exception):
                await admin.execute(f'DROP DATABASE IF EXISTS "{lab.database}" WITH (FORCE)')
        with contextlib.suppress(Exception):
            await admin.close()
