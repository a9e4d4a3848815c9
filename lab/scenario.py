"""The contract between a scenario module and the harness.

A scenario module defines a ``SCENARIO = Scenario(...)``; the harness never imports
anything else from it. Two kinds:

* ``actors``: every variant is ``async def variant(env, conn, actor) -> str``, run by N
  actors under the workload knobs (arrival, connections, timeouts); the harness counts
  the returned business word, or the SQLSTATE the actor raised.
* ``script``: every variant is ``async def variant(env) -> None``, a choreography of its
  own (pauses, crashes, processes) that reports ends with ``env.outcome(word)``.

Scenarios know nothing of where servers come from or how results are stored.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import asyncpg

from lab.claims import Claim
from lab.errors import ScenarioFailure
from lab.published import Measured, published_line
from lab.records import InvariantJson
from lab.waiters import Command, Waiters, drive

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from lab.redisnodes import RedisNodes
    from lab.redissentinel import SentinelGroup
    from lab.steps import Pinned
    from lab.waiters import Waiter

Actor = Callable[["Env", "asyncpg.Connection | None", int], Awaitable[str]]
Script = Callable[["Env"], Awaitable[None]]
Setup = Callable[["Env"], Awaitable[None]]
Invariant = Callable[["Env"], Awaitable[list["Check"]]]


def executes(*statements: str) -> Setup:
    """A setup (or schema) that runs these SQL statements on the run's database, in order."""

    async def run(env: Env) -> None:
        for sql in statements:
            await env.db.execute(sql)

    return run


@dataclass(frozen=True)
class Observer:
    """Something that watches a run from the side (a sampler, a MONITOR, a poller of
    pg_locks), with a lifecycle the harness owns: `start` after setup, before the
    variant runs; `stop` after the variant ended (always, also when it failed), before
    the invariants are checked. What it saw goes on `env.state` or `env.extra_evidence`."""

    name: str
    start: Callable[[Env], Awaitable[None]]
    stop: Callable[[Env], Awaitable[None]]


async def start_observers(observers: tuple[Observer, ...], env: Env) -> list[Observer]:
    """Start each observer in order; the ones started so far are returned even when a
    later one fails (the caller stops those)."""
    started: list[Observer] = []
    try:
        for ob in observers:
            await ob.start(env)
            started.append(ob)
    except BaseException:
        await stop_observers(started, env)
        raise
    return started


async def stop_observers(started: list[Observer], env: Env) -> None:
    """Stop the started observers, last first; every one is stopped even if one fails,
    and the first failure is raised after."""
    first: BaseException | None = None
    for ob in reversed(started):
        try:
            await ob.stop(env)
        except Exception as exc:  # the others still stop
            first = first or exc
    started.clear()
    if first is not None:
        raise first


@dataclass(frozen=True)
class Check:
    """One invariant, checked against the database or Redis after a run."""

    name: str
    held: bool
    detail: str

    def to_json(self) -> InvariantJson:
        return {"name": self.name, "held": self.held, "detail": self.detail}


@dataclass(frozen=True)
class Defaults:
    """Workload knobs a scenario runs with unless the user says otherwise."""

    n: int = 200
    arrival: str = "burst"
    connect: str = "per-actor"
    deadlock_timeout_ms: int = 1000
    actor_timeout_s: float = 120.0
    run_timeout_s: float = 900.0
    # How the actors' Redis commands travel (--redis-client): "pooled" (redis-py, a
    # connection per command in flight) or "pipelined" (one connection, every caller's
    # command written without waiting for earlier replies: node-redis's and ioredis's way)
    redis_client: str = "pooled"


@dataclass(frozen=True)
class Scenario:
    id: str
    doc: str
    kind: Literal["actors", "script"]
    variants: Mapping[str, Callable[..., Awaitable[Any]]]
    outcomes: tuple[str, ...]  # every key a variant may end with (words and SQLSTATEs)
    claims: tuple[Claim, ...] = ()
    published: Mapping[str, str] = field(default_factory=dict)  # variant -> the line printed
    # variant -> the runs the documents published, as numbers (lab.published); the
    # record keeps them, claims and the report read them
    measured: Mapping[str, tuple[Measured, ...]] = field(default_factory=dict)
    setup: Setup | None = None  # every run: the rows (and, without `schema`, the DDL)
    # The DDL (tables, indexes, functions), when declared apart from `setup`: a load runs it
    # before setup; pinned runs once per database, then empty the tables (lab/fastreset.py)
    schema: Setup | None = None
    invariant: Invariant | None = None
    defaults: Defaults = Defaults()
    params: Mapping[str, Any] = field(default_factory=dict)  # scenario knobs and defaults
    param_help: Mapping[str, str] = field(default_factory=dict)
    uses: frozenset[str] = frozenset({"pg"})  # "pg", "redis"
    # Cases ("" = the profile's own settings) whose claims are about how much this machine
    # can do (a client-bound rate) or read a server-wide figure (the WAL position): verify
    # runs them with no other run beside them (lab/verify/lanes.py).
    alone: tuple[str, ...] = ()
    # Cases whose claims are real time (a pause against a TTL, ~100 ms apart): verify runs
    # them beside other such cases only, never beside the CPU-bound runs (lab/verify/lanes.py).
    timed: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()  # "DL", "LC", "DP"
    # counter -> label shown in result lines, the documents' way: GETs=2739, DB calls=1
    headline: Mapping[str, str] = field(default_factory=dict)
    quick: Mapping[str, Any] = field(default_factory=dict)
    # Named settings verify runs besides the profile's own (knob or param overrides applied
    # on top of it), for claims only they exercise: failure modes, other isolation levels.
    cases: Mapping[str, Mapping[str, Any]] = field(
        default_factory=dict
    )  # knob/param overrides for verify
    # PostgreSQL connections a script opens for -n actors, so a run too big for the
    # server is refused before it starts (actor scenarios count theirs from --connect).
    script_connections: Callable[[int], int] | None = None
    # Rejects impossible -n / -p values with LabError, before any server or database is
    # touched (the CLI calls it before starting servers; the runner before every plan).
    validate: Callable[[int, Mapping[str, Any]], None] | None = None
    # Session code with declared steps and schedules (lab/steps.py): `variants` are then
    # its load actors, and `locklab trace` / `explore` run it pinned.
    pinned: Pinned | None = None
    # Sharded runs (--procs, lab.shard): `setup` runs once in the lab's own process;
    # `worker_setup` in every process that runs actors (per-process state, connections),
    # `worker_done` there after its actors ended (settle tasks, leave evidence).
    worker_setup: Setup | None = None
    worker_done: Setup | None = None
    # With --procs auto (the default): one worker process per this many actors, at most
    # `procs_per_core` per core; 0 keeps every run in one process. More than one per core
    # suits actors that mostly wait on timers (a poll): each process handles its actors'
    # replies and wake-ups one batch at a time, and more processes overlap those batches.
    actors_per_process: int = 0
    procs_per_core: int = 1
    # Watchers the harness starts after setup and stops after the variant (Observer).
    observers: tuple[Observer, ...] = ()

    def __post_init__(self) -> None:
        # a variant with published runs prints the line made from them (lab.published),
        # unless the scenario words it itself
        if self.measured:
            lines = {v: published_line(runs) for v, runs in self.measured.items()}
            object.__setattr__(self, "published", {**lines, **self.published})

    @property
    def title(self) -> str:
        return self.doc.strip().splitlines()[0]

    def section(self, name: str) -> str:
        """The docstring's `Name:` section (Symptom, Root cause, Fix, Published, See)."""
        lines = self.doc.strip().splitlines()
        out: list[str] = []
        inside = False
        for line in lines:
            head, colon, rest = line.partition(":")
            if colon and head.strip() and not line.startswith(" "):
                if inside:
                    break
                if head.strip() == name:
                    inside = True
                    out.append(rest.strip())
                    continue
            elif inside:
                out.append(line.strip())
        return " ".join(x for x in out if x)


class Env:
    """What a scenario may use during one run: its database, its Redis prefix, its knobs."""

    def __init__(
        self,
        *,
        scenario: str,
        variant: str,
        dsn: str,
        database: str,
        db: asyncpg.Pool | None,
        redis: aioredis.Redis | None,
        prefix: str,
        params: Mapping[str, Any],
        seed: int,
        n: int,
        redis_url: str = "",
        pgbouncer: Mapping[str, str] | None = None,
        actors_redis_url: str = "",
    ) -> None:
        self.scenario = scenario
        self.variant = variant
        self.dsn = dsn  # the run's own database; holds secrets, never recorded
        self.database = database
        self._db = db
        self._redis = redis
        self.prefix = prefix
        self.redis_url = redis_url  # for worker processes; holds secrets, never recorded
        # where the actors' clients connect: the --rtt proxy's port, else redis_url; a
        # sampler or a benchmark on redis_url goes direct
        self.actors_redis_url = actors_redis_url or redis_url
        self.pgbouncer = dict(pgbouncer or {})  # pool mode -> DSN of the run's database
        self.params = dict(params)
        self.seed = seed
        self.n = n
        self.counters: Counter[str] = Counter()
        self.samples: dict[str, list[float]] = {}
        self.outcomes: Counter[str] = Counter()
        self.events: list[dict[str, Any]] = []
        self.extra_evidence: dict[str, Any] = {}
        self.cleanups: list[Callable[[], None]] = []  # run by the harness after the run
        # every connection connect()/connect_via() opened: the harness terminates those a
        # scenario left open (an error between two connects, say) when the run ends
        self.connections: list[asyncpg.Connection] = []
        self.t0 = time.perf_counter()
        # The processes whose CPU is the lab's (the worker processes of a sharded run).
        self.lab_pids: list[int] = [os.getpid()]
        self.commands: Any = None  # --redis-client pipelined: a lab.autopipe.AutoPipeline
        self._waiters: Waiters | None = None  # lab.waiters' engine on `commands`
        # The scenario's own per-run state (what its observers saw, handles it keeps
        # between setup, the variant and the invariant): on the run, never in the module.
        self.state: dict[str, Any] = {}

    @property
    def cmd(self) -> Any:
        """The actors' Redis: the auto-pipelining client when the run asks for it, else
        `redis` (both take get/set/delete/eval/evalsha/pttl with redis-py's arguments)."""
        return self.commands if self.commands is not None else self.redis

    def do(self, what: Command | Waiter[Any]) -> Awaitable[Any]:
        """Run a waiter (a generator that yields `Command`, `Sleep` or `Call` where a
        coroutine would await: lab/waiters.py), or one `Command`, on the actors' Redis:
        on the pipelined client's waiter engine, else one await per command (pooled)."""
        gen = _only(what) if isinstance(what, Command) else what
        if self.commands is not None:
            if self._waiters is None:  # one engine on the pipelined client, made on first use
                self._waiters = Waiters(self.commands)
            return self._waiters.run(gen)
        return drive(gen, self.redis)

    @property
    def db(self) -> asyncpg.Pool:
        """A small pool on the run's database, for setup, invariants and observers."""
        if self._db is None:
            raise ScenarioFailure(f"{self.scenario}: uses PostgreSQL but did not declare it")
        return self._db

    @property
    def redis(self) -> aioredis.Redis:
        if self._redis is None:
            raise ScenarioFailure(f"{self.scenario}: uses Redis but did not declare it")
        return self._redis

    async def connect(self, **kwargs: Any) -> asyncpg.Connection:
        """A new connection to the run's database, with the run's settings."""
        conn: asyncpg.Connection = await asyncpg.connect(self.dsn, **kwargs)
        self.connections.append(conn)
        return conn

    async def connect_via(self, pool_mode: str, **kwargs: Any) -> asyncpg.Connection:
        """A connection to the run's database through PgBouncer in `pool_mode`
        ("transaction" or "session"); prepared statements off, as transaction mode needs."""
        if pool_mode not in self.pgbouncer:
            raise ScenarioFailure(f"{self.scenario}: no PgBouncer in {pool_mode} mode for this run")
        conn: asyncpg.Connection = await asyncpg.connect(
            self.pgbouncer[pool_mode],
            **{"statement_cache_size": 0, **kwargs},
        )
        self.connections.append(conn)
        return conn

    async def redis_sentinel(self) -> SentinelGroup:
        """A fresh Redis primary, its replica (through a link the run can cut) and three
        Sentinels, owned by this run (lab/redissentinel.py); ready when every Sentinel
        knows the replica and the others; stopped by the harness after the run."""
        from lab.redissentinel import SentinelGroup

        group = SentinelGroup.prepare()
        self.cleanups.append(group.close)  # before start: a failed start stops what did start
        await asyncio.to_thread(group.start_primary)
        group.start_link()  # in the loop's thread, which lives as long as the run
        await asyncio.to_thread(group.start_rest)
        await group.ready()
        return group

    async def redis_nodes(self, k: int) -> RedisNodes:
        """`k` fresh, independent Redis masters owned by this run (Redlock's nodes);
        stopped by the harness after the run, like `redis_sentinel`."""
        from lab.redisnodes import RedisNodes

        nodes = RedisNodes.prepare(k)
        self.cleanups.append(nodes.close)  # before start: a failed start stops what did start
        await asyncio.to_thread(nodes.start)
        return nodes

    def key(self, name: str) -> str:
        """A Redis key under this run's prefix (dropped after the run)."""
        return f"{self.prefix}{name}"

    def rng(self, actor: int = -1) -> random.Random:
        """A random source for one actor, derived from the run's seed."""
        return random.Random(f"{self.seed}:{self.scenario}:{actor}")

    def add(self, name: str, amount: int = 1) -> None:
        self.counters[name] += amount

    def sample(self, name: str, value: float) -> None:
        self.samples.setdefault(name, []).append(value)

    def outcome(self, word: str) -> None:
        """Script scenarios: one actor (worker, pod, request) ended with `word`."""
        self.outcomes[word] += 1

    def now_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000

    def trace(self, who: str, event: str, *, at_ms: float | None = None, **fields: Any) -> None:
        """One line of the run's event trace, stamped in ms since the clock started.

        `at_ms`: when it happened, if not now (e.g. stamped by a worker process's own clock);
        the trace stays in time order.
        """
        t = round(self.now_ms() if at_ms is None else at_ms, 1)
        bisect.insort(
            self.events, {"t_ms": t, "who": who, "event": event, **fields}, key=lambda e: e["t_ms"]
        )


def _only(command: Command) -> Waiter[Any]:
    """One command as a waiter of its own."""
    return (yield command)
