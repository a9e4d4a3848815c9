"""What a scenario may use during one run (`Env`), and an actor's signature (`Actor`).

The harness makes one Env per run (lab.load.variant); a scenario's code reads its
database, its Redis and its knobs from it, and reports counters, outcomes and trace
lines to it.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import asyncpg

from lab.errors import ScenarioFailure
from lab.kit.waiters import Command, Waiters, drive

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from lab.kit.waiters import Waiter
    from lab.servers.redisnodes import RedisNodes
    from lab.servers.redissentinel import SentinelGroup

Actor = Callable[["Env", "asyncpg.Connection | None", int], Awaitable[str]]


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
        self.commands: Any = None  # --redis-client pipelined: a lab.kit.autopipe.AutoPipeline
        self._waiters: Waiters | None = None  # lab.kit.waiters' engine on `commands`
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
        coroutine would await: lab/kit/waiters.py), or one `Command`, on the actors' Redis:
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
        Sentinels, owned by this run (lab/servers/redissentinel.py); ready when every Sentinel
        knows the replica and the others; stopped by the harness after the run."""
        from lab.servers.redissentinel import SentinelGroup

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
        from lab.servers.redisnodes import RedisNodes

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
