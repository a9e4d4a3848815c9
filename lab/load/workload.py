"""Runs N actors: arrival pattern, connections opened before the clock, hard timeouts.

Connections are opened before the clock starts, so that the wall time a run records is
the scenario's, not its actors' logins (SCRAM, a backend's start) as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import urllib.parse
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg

from lab.core.knobs import (
    PGBOUNCER_MODES,
    Knobs,
    parse_connect,
    start_offsets,
)
from lab.core.outcome import TIMEOUT, classify
from lab.core.scenario import Actor, Env
from lab.errors import LabError, ScenarioFailure
from lab.load.txpool import FifoPool, TxPoolConnection
from lab.procs import netdelay
from lab.procs.netdelay import Proxy, parse_rtt

CONNECT_CONCURRENCY = 20
RTT_PROBES = 20  # round trips timed before the clock (SELECT 1; PING for Redis: lab.load.links)
LOOPBACK = ("127.0.0.1", "localhost")  # where the delay proxy can reach a server
T = TypeVar("T")


@dataclass
class ActorsResult:
    outcomes: Counter[str]
    wall_ms: float
    latencies_ms: dict[str, list[float]]  # per outcome key


async def run_actors(
    env: Env,
    actor: Actor,
    knobs: Knobs,
    *,
    uses_pg: bool,
    indices: Sequence[int] | None = None,
    released: Callable[[], Awaitable[float]] | None = None,
) -> ActorsResult:
    """Run `knobs.n` copies of `actor`; every actor ends with an outcome, or the run fails.

    A worker process of a sharded run (lab.load.shard) runs only the actors in `indices`, at
    their offsets in the whole run's arrival, and starts its clock at the instant
    (time.monotonic()) `released` returns once every worker is ready.

    With `--rtt pg:<ms>`, the actors' connections go through a delay proxy process started
    here and stopped here (also on Ctrl-C); setup, invariants and evidence bypass it.
    Through PgBouncer the delay is on PgBouncer's hop to PostgreSQL instead: the runner
    hands `env.pgbouncer` a PgBouncer of the variant's own (lab/load/links.py)."""
    rtt = parse_rtt(knobs.rtt)
    proxy: Proxy | None = None
    try:
        actor_dsn = env.dsn
        if uses_pg and rtt.get("pg") and env.dsn and knobs.connect not in PGBOUNCER_MODES:
            proxy = start_proxy(env.dsn, rtt["pg"])
            actor_dsn = via_port(env.dsn, proxy.port)
        return await _run_actors(
            env,
            actor,
            knobs,
            uses_pg=uses_pg,
            dsn=actor_dsn,
            indices=indices,
            released=released,
        )
    finally:
        if proxy is not None:
            proxy.stop()


def start_proxy(url: str, rtt_ms: float, default_port: int = 5432) -> Proxy:
    """The one place the lab spawns its delay proxy (the servers' reaper may take it over),
    in front of the server of `url` (a DSN or a Redis URL), which must be on loopback."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname not in LOOPBACK:
        where = parts.netloc.rpartition("@")[2] or parts.scheme
        raise LabError(f"--rtt: the delay proxy reaches loopback servers only, not {where}")
    return netdelay.spawn(parts.port or default_port, rtt_ms)


def via_port(dsn: str, port: int) -> str:
    """The same DSN (or Redis URL) on 127.0.0.1:`port` (the proxy's), user, password and
    database kept."""
    parts = urllib.parse.urlsplit(dsn)
    userinfo, at, _ = parts.netloc.rpartition("@")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{userinfo}{at}127.0.0.1:{port}"))


async def measure_rtt(conn: asyncpg.Connection, rounds: int = RTT_PROBES) -> dict[str, float]:
    """Median, min and max ms of `rounds` sequential `SELECT 1` round trips on `conn`."""
    return await round_trips(lambda: conn.fetchval("SELECT 1"), rounds)


async def round_trips(
    trip: Callable[[], Awaitable[Any]], rounds: int = RTT_PROBES
) -> dict[str, float]:
    """Median, min and max ms of `rounds` sequential awaits of `trip()` (one round trip)."""
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        await trip()
        times.append((time.perf_counter() - began) * 1000)
    return {
        "median": round(statistics.median(times), 2),
        "min": round(min(times), 2),
        "max": round(max(times), 2),
    }


async def _network_evidence(
    env: Env, knobs: Knobs, probe: asyncpg.Connection, asked: float
) -> dict[str, Any]:
    """What the actors' connections paid per round trip, measured before the clock."""
    through = await measure_rtt(probe)
    async with env.db.acquire() as direct:
        bypass = await measure_rtt(direct)  # type: ignore[arg-type]
    where = " between PgBouncer and PostgreSQL" if knobs.connect in PGBOUNCER_MODES else ""
    return {
        "rtt_ms_asked": asked,
        "proxy": f"lab.procs.netdelay process{where}, half the RTT each way" if asked else "none",
        "probe": f"{RTT_PROBES} x SELECT 1 before the clock started",
        "actors_rtt_ms": through,
        "bypass_rtt_ms": bypass,
        "paid_by": f"the actors' connections (--connect {knobs.connect})",
        "bypassed_by": "setup, invariants, observers and evidence (the run's small pool, admin)",
    }


async def _run_actors(
    env: Env,
    actor: Actor,
    knobs: Knobs,
    *,
    uses_pg: bool,
    dsn: str,
    indices: Sequence[int] | None = None,
    released: Callable[[], Awaitable[float]] | None = None,
) -> ActorsResult:
    """Open the actors' connections, run the actors, and close the connections on every path."""
    kind, size = parse_connect(knobs.connect)
    asked = parse_rtt(knobs.rtt).get("pg", 0.0) if uses_pg else 0.0
    offsets = start_offsets(knobs.arrival, knobs.n, knobs.seed)  # bad input before connecting
    mine = list(range(knobs.n)) if indices is None else list(indices)
    conns = _Connections(size)
    try:
        if uses_pg:
            await conns.open(env, kind, mine, dsn)
        if uses_pg and (asked or kind == "tx-pool"):
            await conns.measure(env, knobs, asked)
    except BaseException:
        await conns.close()
        raise
    crowd = _Crowd(env, actor, knobs, conns, offsets)
    try:
        return await crowd.run(mine, released)
    finally:
        # Also on Ctrl-C: no actor may outlive its connection, or it dies unobserved.
        await conns.close(env.extra_evidence)


@dataclass
class _Connections:
    """The actors' PostgreSQL connections: one per actor, asyncpg's pool, or a FIFO pool."""

    size: int  # the pool's, for --connect pool:<size> and tx-pool:<size>
    own: dict[int, asyncpg.Connection] = field(default_factory=dict)  # actor -> its own
    pool: asyncpg.Pool | None = None
    fifo: FifoPool | None = None  # a connection per transaction attempt

    async def open(self, env: Env, kind: str, mine: list[int], dsn: str) -> None:
        """Open them the --connect way: per actor (direct or via PgBouncer), FIFO, or pooled."""
        if kind == "per-actor" or kind in PGBOUNCER_MODES:
            opened = await _open_connections(env, len(mine), PGBOUNCER_MODES.get(kind), dsn)
            self.own = dict(zip(mine, opened, strict=True))
        elif kind == "tx-pool":
            opened = await _open_connections(env, self.size, None, dsn)

            async def reconnect() -> asyncpg.Connection:
                return (await _open_connections(env, 1, None, dsn))[0]

            self.fifo = FifoPool(opened, reconnect)
        else:
            self.pool = await asyncpg.create_pool(dsn, min_size=self.size, max_size=self.size)

    async def measure(self, env: Env, knobs: Knobs, asked: float) -> None:
        """Time round trips on one of them and on the run's own pool, into env's evidence."""
        if self.fifo is not None:
            probe = self.fifo.conns[0]
        elif self.pool is not None:
            probe = await self.pool.acquire()  # type: ignore[assignment]
        else:
            probe = next(iter(self.own.values()))
        try:
            env.extra_evidence["network"] = await _network_evidence(env, knobs, probe, asked)
        finally:
            if self.pool is not None:
                await self.pool.release(probe)  # type: ignore[arg-type]

    async def run(self, actor: Actor, env: Env, i: int, limit_s: float) -> str:
        """Actor `i`'s outcome word, run on its connection within `limit_s`."""
        if self.pool is not None:
            async with self.pool.acquire() as pooled:
                pconn: asyncpg.Connection = pooled  # type: ignore[assignment]
                return await hard_limit(actor(env, pconn, i), limit_s)
        if self.fifo is not None:  # a connection per transaction attempt, FIFO
            txconn: Any = TxPoolConnection(self.fifo, str(i))
            return await hard_limit(actor(env, txconn, i), limit_s)
        return await hard_limit(actor(env, self.own.get(i), i), limit_s)

    async def close(self, evidence: dict[str, Any] | None = None) -> None:
        """Terminate them all; with `evidence`, record the FIFO pool's counts there first."""
        await _close(list(self.own.values()), self.pool)
        if self.fifo is not None:
            if evidence is not None:
                evidence["tx_pool"] = {"size": self.size, **self.fifo.stats()}
            await self.fifo.close()


@dataclass
class _Crowd:
    """The actors of one process, started at their arrival offsets, their outcomes tallied."""

    env: Env
    actor: Actor
    knobs: Knobs
    conns: _Connections
    offsets: list[float]
    outcomes: Counter[str] = field(default_factory=Counter)
    latencies: dict[str, list[float]] = field(default_factory=dict)  # per outcome key
    failure: list[BaseException] = field(default_factory=list)  # unclassified errors

    async def run(
        self, mine: list[int], released: Callable[[], Awaitable[float]] | None
    ) -> ActorsResult:
        """Start the clock, run the actors in `mine` until done or the run's hard timeout."""
        env, knobs = self.env, self.knobs
        tasks: list[asyncio.Task[None]] = []
        try:
            ahead = 0.0
            if released is not None:  # a shared instant: every worker's clock starts there
                ahead = max(0.0, await released() - time.monotonic())
            env.t0 = time.perf_counter() + ahead
            tasks = [asyncio.create_task(self.one(i)) for i in mine]
            _, pending = await asyncio.wait(
                tasks, timeout=knobs.run_timeout_s, return_when=asyncio.FIRST_EXCEPTION
            )
            await _cancel(pending)
            if self.failure:
                exc = self.failure[0]
                raise ScenarioFailure(
                    f"{env.scenario} / {env.variant}: an actor raised {type(exc).__name__}: {exc}"
                ) from exc
            self.outcomes[TIMEOUT] += len(pending)  # the run's hard timeout: whoever is left
            wall_ms = (time.perf_counter() - env.t0) * 1000
        finally:
            await _cancel(tasks)
        return ActorsResult(self.outcomes, wall_ms, self.latencies)

    async def one(self, i: int) -> None:
        """Actor `i`: wait for its offset, run it, and tally its outcome and latency."""
        await _sleep_until(self.env.t0 + self.offsets[i])
        start = time.perf_counter()
        try:
            word = await self.conns.run(self.actor, self.env, i, self.knobs.actor_timeout_s)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            key = classify(exc)
            if key is None:
                self.failure.append(exc)
                raise
            word = key
        self.latencies.setdefault(word, []).append((time.perf_counter() - start) * 1000)
        self.outcomes[word] += 1


async def _sleep_until(due: float) -> None:
    """Sleep until time.perf_counter() reaches `due`."""
    # the clock that stamps the start decides it: uvloop's timers have 1 ms grain and
    # its loop.time() is cached, so a sleep on them alone can end before the offset
    for _ in range(100):  # in practice one sleep, a second when the timer fired early
        if (left := due - time.perf_counter()) <= 0:
            break
        await asyncio.sleep(left)


async def hard_limit(coro: Awaitable[T], limit_s: float) -> T:
    """`coro`'s result, or TimeoutError after `limit_s` with the task really ended.

    asyncio.wait_for trusts one cancel(); redis-py can swallow a cancellation that lands
    mid-command, and a polling actor then runs on past its limit. So cancel until it ends.
    """
    task = asyncio.ensure_future(coro)
    try:
        done, _ = await asyncio.wait({task}, timeout=limit_s)
    except asyncio.CancelledError:
        await _insist_cancel(task)
        raise
    if task in done:
        return task.result()
    await _insist_cancel(task)
    raise TimeoutError(f"hard limit of {limit_s} s")


async def _insist_cancel(task: asyncio.Future[Any], rounds: int = 100) -> None:
    for _ in range(rounds):
        if task.done():
            break
        task.cancel()
        await asyncio.wait({task}, timeout=0.05)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: it ended past its limit, its result does not count


async def _cancel(tasks: Iterable[asyncio.Task[None]]) -> None:
    live = [t for t in tasks if not t.done()]
    for t in live:
        t.cancel()
    await asyncio.gather(*live, return_exceptions=True)
    for t in tasks:  # mark every stored exception as retrieved
        if t.done() and not t.cancelled():
            t.exception()


async def _open_connections(
    env: Env, n: int, pgbouncer_mode: str | None = None, dsn: str = ""
) -> list[asyncpg.Connection]:
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def open_one(i: int) -> asyncpg.Connection:
        async with gate:
            if pgbouncer_mode:
                return await env.connect_via(pgbouncer_mode, server_settings=_app_name(env, i))
            if dsn and dsn != env.dsn:  # through the --rtt proxy
                conn: asyncpg.Connection = await asyncpg.connect(
                    dsn, server_settings=_app_name(env, i)
                )
                env.connections.append(conn)
                return conn
            return await env.connect(server_settings=_app_name(env, i))

    results = await asyncio.gather(*(open_one(i) for i in range(n)), return_exceptions=True)
    conns = [c for c in results if isinstance(c, asyncpg.Connection)]
    errors = [e for e in results if isinstance(e, BaseException)]
    if errors:
        await _close(conns, None)
        raise LabError(f"could not open {n} connections: {errors[0]}")
    return conns


def _app_name(env: Env, i: int) -> dict[str, str]:
    return {"application_name": f"locklab/{env.scenario}/{env.variant}/{i}"[:63]}


async def _close(conns: list[asyncpg.Connection], pool: asyncpg.Pool | None) -> None:
    for c in conns:
        with contextlib.suppress(Exception):
            c.terminate()
    if pool is not None:
        with contextlib.suppress(Exception):
            pool.terminate()


def percentiles(values: list[float]) -> dict[str, float]:
    """min, p50, p95, p99, max of `values` (rounded to 0.1). A percentile is the
    nearest-rank one: the p-th of n sorted values is the ceil(p * n / 100)-th (the p50 of
    200 values is the 100th, the p99 the 198th), always a value that was measured."""
    if not values:
        return {}
    s = sorted(values)

    def rank(percent: int) -> float:
        nearest = -(-percent * len(s) // 100)  # ceil, in integers: no float rounding
        return round(s[max(nearest, 1) - 1], 1)

    return {
        "min": round(s[0], 1),
        "p50": rank(50),
        "p95": rank(95),
        "p99": rank(99),
        "max": round(s[-1], 1),
    }
