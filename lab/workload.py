"""Runs N actors: arrival pattern, connections opened before the clock, hard timeouts.

Connections are opened before the clock starts, because with every actor connecting
inside the timed window connection setup is 10–13 % of a 200-actor run (design.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import asyncpg

from lab.errors import LabError, ScenarioFailure
from lab.outcome import TIMEOUT, classify
from lab.scenario import Actor, Env

CONNECT_CONCURRENCY = 20
T = TypeVar("T")


@dataclass(frozen=True)
class Knobs:
    """Everything about how the load arrives; recorded with every result."""

    n: int
    arrival: str
    connect: str
    deadlock_timeout_ms: int
    seed: int
    actor_timeout_s: float
    run_timeout_s: float
    procs: int = 0  # worker processes the actors are sharded over; 0 = the scenario's choice
    redis_client: str = "pooled"  # pooled (redis-py) | pipelined (lab.autopipe, node-redis's way)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_arrival(spec: str) -> tuple[str, float, float]:
    """`burst` | `stagger:<ms>[~<jitter_ms>]` | `poisson:<per_s>` -> (kind, value, jitter).

    `stagger:5ms~1ms` spaces starts by 5 ms plus a seeded uniform 0..1 ms, the way a
    `setTimeout(5)` loop fires late; exact 5 ms spacing phase-locks with a 5 ms step pause.
    """
    if spec == "burst":
        return "burst", 0.0, 0.0
    num = r"(\d+(?:\.\d+)?)"
    if m := re.fullmatch(rf"stagger:{num}(?:ms)?(?:~{num}(?:ms)?)?", spec):
        return "stagger", float(m[1]), float(m[2] or 0)
    if (m := re.fullmatch(rf"poisson:{num}(?:/s)?", spec)) and float(m[1]) > 0:
        return "poisson", float(m[1]), 0.0
    raise LabError(
        f"--arrival {spec!r}: expected burst, stagger:<ms>[~<jitter_ms>] or poisson:<per_s>"
    )


PGBOUNCER_MODES = {"pgbouncer-transaction": "transaction", "pgbouncer-session": "session"}


def parse_connect(spec: str) -> tuple[str, int]:
    """`per-actor` | `pool:<size>` | `pgbouncer-transaction` | `pgbouncer-session`."""
    if spec == "per-actor":
        return "per-actor", 0
    if spec in PGBOUNCER_MODES:
        return spec, 0
    m = re.fullmatch(r"pool:(\d+)", spec)
    if not m or int(m[1]) < 1:
        raise LabError(
            f"--connect {spec!r}: expected per-actor, pool:<size>, "
            "pgbouncer-transaction or pgbouncer-session"
        )
    return "pool", int(m[1])


REDIS_CLIENTS = ("pooled", "pipelined")


def parse_redis_client(spec: str) -> str:
    if spec not in REDIS_CLIENTS:
        raise LabError(f"--redis-client {spec!r}: expected {' or '.join(REDIS_CLIENTS)}")
    return spec


def start_offsets(arrival: str, n: int, seed: int) -> list[float]:
    """Seconds after the clock starts at which each actor begins."""
    kind, value, jitter = parse_arrival(arrival)
    if kind == "burst":
        return [0.0] * n
    rng = random.Random(f"{seed}:arrival")
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        if kind == "stagger":
            t += (value + (rng.uniform(0, jitter) if jitter else 0.0)) / 1000
        else:
            t += rng.expovariate(value)
    return out


def connections_needed(connect: str, n: int) -> int:
    """Client connections the actors hold (through PgBouncer: to PgBouncer, not the server)."""
    kind, size = parse_connect(connect)
    return n if kind == "per-actor" or kind in PGBOUNCER_MODES else size


def server_connections_needed(connect: str, n: int) -> int:
    """Connections the actors take from the PostgreSQL server itself."""
    kind, _ = parse_connect(connect)
    return 0 if kind in PGBOUNCER_MODES else connections_needed(connect, n)


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

    A worker process of a sharded run (lab.shard) runs only the actors in `indices`, at
    their offsets in the whole run's arrival, and starts its clock at the instant
    (time.monotonic()) `released` returns once every worker is ready.
    """
    kind, size = parse_connect(knobs.connect)
    offsets = start_offsets(knobs.arrival, knobs.n, knobs.seed)  # bad input before connecting
    mine = list(range(knobs.n)) if indices is None else list(indices)
    conns: dict[int, asyncpg.Connection] = {}
    pool: asyncpg.Pool | None = None
    if uses_pg and (kind == "per-actor" or kind in PGBOUNCER_MODES):
        opened = await _open_connections(env, len(mine), PGBOUNCER_MODES.get(kind))
        conns = dict(zip(mine, opened, strict=True))
    elif uses_pg:
        pool = await asyncpg.create_pool(env.dsn, min_size=size, max_size=size)
    outcomes: Counter[str] = Counter()
    latencies: dict[str, list[float]] = {}
    failure: list[BaseException] = []
    loop = asyncio.get_running_loop()

    async def one(i: int) -> None:
        await asyncio.sleep(max(0.0, t0 + offsets[i] - loop.time()))
        start = time.perf_counter()
        try:
            if pool is not None:
                async with pool.acquire() as pooled:
                    pconn: asyncpg.Connection = pooled  # type: ignore[assignment]
                    word = await hard_limit(actor(env, pconn, i), knobs.actor_timeout_s)
            else:
                conn = conns.get(i)
                word = await hard_limit(actor(env, conn, i), knobs.actor_timeout_s)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            key = classify(exc)
            if key is None:
                failure.append(exc)
                raise
            word = key
        latencies.setdefault(word, []).append((time.perf_counter() - start) * 1000)
        outcomes[word] += 1

    tasks: list[asyncio.Task[None]] = []
    try:
        ahead = 0.0
        if released is not None:  # a shared instant: every worker's clock starts there
            ahead = max(0.0, await released() - time.monotonic())
        t0 = loop.time() + ahead
        env.t0 = time.perf_counter() + ahead
        tasks = [asyncio.create_task(one(i)) for i in mine]
        _, pending = await asyncio.wait(
            tasks, timeout=knobs.run_timeout_s, return_when=asyncio.FIRST_EXCEPTION
        )
        await _cancel(pending)
        if failure:
            exc = failure[0]
            raise ScenarioFailure(
                f"{env.scenario} / {env.variant}: an actor raised {type(exc).__name__}: {exc}"
            ) from exc
        outcomes[TIMEOUT] += len(pending)  # the run's hard timeout: whoever is left
        wall_ms = (time.perf_counter() - env.t0) * 1000
    finally:
        # Also on Ctrl-C: no actor may outlive its connection, or it dies unobserved.
        await _cancel(tasks)
        await _close(list(conns.values()), pool)
    return ActorsResult(outcomes, wall_ms, latencies)


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
    env: Env, n: int, pgbouncer_mode: str | None = None
) -> list[asyncpg.Connection]:
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def open_one(i: int) -> asyncpg.Connection:
        async with gate:
            if pgbouncer_mode:
                return await env.connect_via(pgbouncer_mode, server_settings=_app_name(env, i))
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
    if not values:
        return {}
    s = sorted(values)

    def q(p: float) -> float:
        return round(s[min(len(s) - 1, int(p * len(s)))], 1)

    return {
        "min": round(s[0], 1),
        "p50": q(0.50),
        "p95": q(0.95),
        "p99": q(0.99),
        "max": round(s[-1], 1),
    }
