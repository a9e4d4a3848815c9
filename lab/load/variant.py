"""One scenario x variant run: a fresh database, setup, the load, invariants, evidence and
the variant's record, as named steps (_VariantRun), with whatever a step opened closed on
every path. run_plan (lab/load/runner.py) runs a plan's variants through run_variant."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from lab.aio import within
from lab.core.knobs import connections_needed
from lab.core.outcome import TIMEOUT, notation, ordered
from lab.core.provenance import lab_info
from lab.core.records import Record
from lab.core.results import SCHEMA_VERSION
from lab.core.scenario import Actor, Check, Env, Observer, Script, start_observers, stop_observers
from lab.errors import LabError, ScenarioFailure
from lab.load.databases import (
    GONE,
    admin_connect,
    create_statement,
    database_name,
    probe_pg,
    set_deadlock_timeout,
    take_spare,
)
from lab.load.evidence import (
    commandstats_delta,
    deadlocks_since,
    parse_deadlocks,
    parse_lock_waits,
    pg_deadlocks,
    summarize_deadlocks,
)
from lab.load.facts import load_facts, machine_window, summary
from lab.load.links import Links, open_links
from lab.load.plan import ADMIN_CONNECTIONS, RunPlan, check_room, sockets_needed
from lab.load.redisclients import PIPELINED_CONNECTIONS, REDIS_OBSERVERS, redis_client
from lab.load.shard import resolve_procs
from lab.load.workload import ActorsResult, hard_limit, percentiles, run_actors
from lab.servers import Servers
from lab.servers.base import with_database
from lab.servers.faults import check_resources, fault_named, guard_variant, teardown_s

MAX_TRACE = 5000


async def run_variant(
    plan: RunPlan, variant: str, servers: Servers, made: asyncio.Task[str] | None = None
) -> Record:
    """One variant's record. Anything a scenario raises that is neither bad input (LabError)
    nor a declared failure becomes a ScenarioFailure naming scenario and variant.
    `made`: its database, being created already (run_plan makes the next one meanwhile)."""
    try:
        check_resources(sockets_needed(plan), plan.knobs.n)
        during = f"{plan.scenario.id} / {variant}"
        return await guard_variant(_run_variant(plan, variant, servers, made), servers, during)
    except (LabError, ScenarioFailure):
        raise
    except Exception as exc:
        raise ScenarioFailure(
            f"{plan.scenario.id} / {variant}: {type(exc).__name__}: {exc}"
        ) from exc


async def _run_variant(
    plan: RunPlan, variant: str, servers: Servers, made: asyncio.Task[str] | None = None
) -> Record:
    """One variant's record, with whatever its run opened closed on every path."""
    scenario = plan.scenario
    if variant not in scenario.variants and variant not in scenario.mutants:
        raise LabError(f"{scenario.id} has no variant {variant!r} ({', '.join(scenario.variants)})")
    run = _VariantRun(plan, variant, servers, made)
    try:
        return await run.record()
    finally:
        await run.close()


@dataclass
class _VariantRun:
    """One variant's run as named steps, holding what each step opened for `close`."""

    plan: RunPlan
    variant: str
    servers: Servers
    made: asyncio.Task[str] | None  # its database, being created already (run_plan)
    started_at: str = field(init=False)
    database: str = field(init=False)
    prefix: str = field(init=False)
    admin: asyncpg.Connection | None = None
    created: bool = False  # the run's database exists: `close` drops it
    dsn: str = ""
    pool: asyncpg.Pool | None = None
    procs: int = 1
    links: Links = field(default_factory=Links)
    rclient: Any = None  # env.redis: the actors' and setup's (through the --rtt proxy)
    own_redis: Any = None  # the lab's own: INFO, commandstats, cleanup; never delayed
    commands: Any = None
    env: Env | None = None
    observed: list[Observer] = field(default_factory=list)
    log_offset: int = 0
    stat_before: int = 0
    redis_before: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.database = database_name(self.plan.run_id, self.plan.scenario.id, self.variant)
        self.prefix = f"locklab:{self.plan.run_id}:{self.variant}:"

    @property
    def uses_pg(self) -> bool:
        """Whether the scenario uses PostgreSQL."""
        return "pg" in self.plan.scenario.uses

    @property
    def uses_redis(self) -> bool:
        """Whether the scenario uses Redis."""
        return "redis" in self.plan.scenario.uses

    async def record(self) -> Record:
        """Open the database and Redis, set up, run the load, collect the evidence."""
        scenario, knobs = self.plan.scenario, self.plan.knobs
        if self.uses_pg:
            await self.open_database()
        self.procs = resolve_procs(scenario, knobs)
        self.links = open_links(self.servers, scenario, knobs)  # --rtt's proxies: Redis, PgBouncer
        if self.uses_redis:
            await self.open_redis()
        env = self.make_env()
        await self.set_up(env)
        network = await self.links.measure(env, self.own_redis, knobs)  # before the clock
        self.observed = await start_observers(scenario.observers, env)
        await self.mark_before()
        machine0 = machine_window()
        result, load = await self.run_load(env)
        machine = machine_window(machine0)
        self.check_outcomes(result.outcomes)
        await stop_observers(self.observed, env)
        checks = await scenario.invariant(env) if scenario.invariant else []
        evidence = await self.collect_evidence(env, network, machine, result.outcomes)
        return self.make_record(env, result, checks, evidence, load)

    async def open_database(self) -> None:
        """Check the server has room, make the run's database and open its small pool."""
        self.admin = await admin_connect(self.servers)
        admin = self.admin
        check_room(self.plan, self.servers, await probe_pg(admin, self.servers))
        if self.made is not None:
            self.created = True  # dropped by `close` whatever happens
            await self.made
        else:
            if not await take_spare(admin, self.servers, self.database):
                await admin.execute(create_statement(self.servers, self.database))
            self.created = True
            await set_deadlock_timeout(admin, self.database, self.plan.knobs.deadlock_timeout_ms)
        assert self.servers.pg is not None
        self.dsn = self.servers.pg.dsn
        self.pool = await asyncpg.create_pool(
            self.dsn, database=self.database, min_size=1, max_size=ADMIN_CONNECTIONS - 1
        )

    async def open_redis(self) -> None:
        """Open the actors' Redis client, the lab's own, and the pipeline when asked for."""
        knobs, links = self.plan.knobs, self.links
        # One Redis connection per actor (or the --connect pool size), plus observers;
        # pipelined, or with the actors in worker processes, the observers' only.
        actors_here = 0 if self.procs > 1 else connections_needed(knobs.connect, knobs.n)
        pooled = actors_here if knobs.redis_client == "pooled" else 0
        self.rclient = await redis_client(self.servers, pooled + REDIS_OBSERVERS, links.redis_url)
        if links.redis_ms:
            self.own_redis = await redis_client(self.servers, REDIS_OBSERVERS)
        else:
            self.own_redis = self.rclient
        if knobs.redis_client == "pipelined" and self.procs == 1:
            from lab.kit.autopipe import AutoPipeline

            self.commands = await AutoPipeline.connect(links.redis_url, PIPELINED_CONNECTIONS)

    def make_env(self) -> Env:
        """Build the Env the scenario's code sees, on the database and Redis just opened."""
        plan, servers, links, database = self.plan, self.servers, self.links, self.database
        self.env = Env(
            scenario=plan.scenario.id,
            variant=self.variant,
            dsn=with_database(self.dsn, database) if self.dsn else "",
            database=database,
            db=self.pool,
            redis=self.rclient,
            prefix=self.prefix,
            params=plan.params,
            seed=plan.knobs.seed,
            n=plan.knobs.n,
            redis_url=servers.redis.url if (self.uses_redis and servers.redis) else "",
            actors_redis_url=links.redis_url if self.uses_redis else "",
            pgbouncer={m: with_database(d, database) for m, d in links.pgbouncer.items()},
        )
        self.env.commands = self.commands
        return self.env

    async def set_up(self, env: Env) -> None:
        """Run the schema and setup on the fresh database, and worker_setup when actors run here."""
        scenario = self.plan.scenario
        if scenario.schema is not None:  # a fresh database: the DDL, then the rows
            await scenario.schema(env)
        if scenario.setup is not None:
            await scenario.setup(env)
        if scenario.worker_setup is not None and self.procs == 1:
            await scenario.worker_setup(env)

    async def mark_before(self) -> None:
        """Note where the server log, the database's deadlock count and Redis's commandstats stand."""
        pg = self.servers.pg
        self.log_offset = pg.log_size() if (self.uses_pg and pg) else 0
        self.stat_before = await pg_deadlocks(self.admin, self.database) if self.admin else 0
        self.redis_before = await self.own_redis.info("commandstats") if self.own_redis else {}

    async def run_load(self, env: Env) -> tuple[ActorsResult, dict[str, Any]]:
        """Run the actors (here or over worker processes) or the script; the result and load facts."""
        scenario, knobs = self.plan.scenario, self.plan.knobs
        if scenario.kind != "actors":
            return await self.run_script(env), {}
        actor: Actor = scenario.code(self.variant)
        cpu0 = time.process_time()
        load: dict[str, Any] = {}
        if self.procs > 1:
            from lab.load.shard import run_sharded

            res, load = await run_sharded(
                env, scenario, self.variant, knobs, self.procs, uses_pg=self.uses_pg
            )
        else:
            res = await run_actors(env, actor, knobs, uses_pg=self.uses_pg)
            if scenario.worker_done is not None:
                await scenario.worker_done(env)
        load = load_facts(knobs, self.procs, time.process_time() - cpu0, load)
        env.outcomes = res.outcomes
        return res, load

    async def run_script(self, env: Env) -> ActorsResult:
        """Run the variant's script under the run's hard limit; its outcomes and wall time."""
        script: Script = self.plan.scenario.code(self.variant)
        env.t0 = time.perf_counter()
        try:
            await hard_limit(script(env), self.plan.knobs.run_timeout_s)
        except TimeoutError:
            env.outcome(TIMEOUT)
        wall_ms = (time.perf_counter() - env.t0) * 1000
        return ActorsResult(env.outcomes, wall_ms, {})  # a script's: no latencies

    def check_outcomes(self, outcomes: Counter[str]) -> None:
        """Fail the run on an outcome the scenario does not declare."""
        scenario = self.plan.scenario
        unexpected = set(outcomes) - set(scenario.outcomes) - {TIMEOUT}
        if unexpected:
            raise ScenarioFailure(
                f"{scenario.id} / {self.variant}: undeclared outcome(s) {sorted(unexpected)} "
                f"in {notation(outcomes)}"
            )

    async def collect_evidence(
        self, env: Env, network: dict[str, Any], machine: Any, outcomes: Counter[str]
    ) -> dict[str, Any]:
        """Gather the scenario's evidence, the links', the machine's, the servers' counts."""
        evidence: dict[str, Any] = dict(env.extra_evidence)
        if network:  # Redis's and PgBouncer's links, beside what the actors' PostgreSQL paid
            evidence["network"] = {**evidence.get("network", {}), **network}
        evidence["machine"] = machine
        pg, database = self.servers.pg, self.database
        if self.uses_pg and self.admin is not None and pg is not None:
            evidence["pg_stat_deadlocks"] = await deadlocks_since(
                self.admin, database, self.stat_before, outcomes.get("40P01", 0)
            )
            log = pg.read_log(self.log_offset)
            evidence["deadlocks"] = (
                summarize_deadlocks(parse_deadlocks(log, database)) if log is not None else None
            )
            if log is not None and (waits := parse_lock_waits(log, database)):
                evidence["lock_waits"] = waits  # sessions that SET log_lock_waits = on
        if self.own_redis is not None:
            evidence["redis_commandstats"] = commandstats_delta(
                self.redis_before, await self.own_redis.info("commandstats")
            )
        return evidence

    def make_record(
        self,
        env: Env,
        result: ActorsResult,
        checks: Sequence[Check],
        evidence: dict[str, Any],
        load: dict[str, Any],
    ) -> Record:
        """Assemble the variant's record; claims are attached later, by run_plan."""
        plan, scenario, variant = self.plan, self.plan.scenario, self.variant
        latencies = result.latencies_ms
        record: Record = {  # typed: mypy checks every key claims will read
            "schema": SCHEMA_VERSION,
            "run_id": plan.run_id,
            "scenario": scenario.id,
            "variant": variant,
            "title": scenario.title,
            "started_at": self.started_at,
            "knobs": plan.knobs.to_json(),
            "params": dict(plan.params),
            "servers": {i.product: i.to_json() for i in self.servers.infos()},
            "lab": lab_info(),
            "outcomes": ordered(result.outcomes, scenario.outcomes),
            "wall_ms": round(result.wall_ms, 1),
            "latency_ms": percentiles([x for v in latencies.values() for x in v]),
            "latency_ms_by_outcome": {k: percentiles(v) for k, v in sorted(latencies.items())},
            "counters": dict(env.counters),
            "headline": {label: env.counters.get(k, 0) for k, label in scenario.headline.items()},
            "samples": {k: summary(v) for k, v in env.samples.items()},
            "invariants": [c.to_json() for c in checks],
            "evidence": evidence,
            "trace": env.events[:MAX_TRACE],
            "published": scenario.published.get(variant, ""),
            "published_measured": [m.to_json() for m in scenario.measured.get(variant, ())],
            "claims": [],
        }
        if load:
            record["load"] = load
        return record

    async def close(self) -> None:
        """Undo what the steps opened: the scenario's clients, the pool, Redis, links, database."""
        await self.close_scenario_clients()
        if self.pool is not None:
            with contextlib.suppress(Exception):
                await within(self.pool.close(), teardown_s(5))
            self.pool.terminate()
        await self.close_redis()
        self.links.close()  # the --rtt proxies and PgBouncer, by PID
        await self.drop_database()

    async def close_scenario_clients(self) -> None:
        """Stop a failed run's observers; close the pipeline, the scenario's connections, cleanups."""
        env = self.env
        if self.observed and env is not None:  # the variant failed: stop what watches it
            with contextlib.suppress(Exception):
                await stop_observers(self.observed, env)
        if self.commands is not None:
            with contextlib.suppress(Exception):
                await self.commands.aclose()
        for conn in env.connections if env is not None else []:
            if not conn.is_closed():
                conn.terminate()
        for cleanup in reversed(env.cleanups if env is not None else []):
            with contextlib.suppress(Exception):
                await asyncio.to_thread(cleanup)

    async def close_redis(self) -> None:
        """Delete the run's Redis keys and close both clients, unless a server is at fault."""
        # Once a server is named at fault, Redis is not waited on (a stopped one never
        # answers; wait_for cannot bound redis-py, which may swallow the cancellation).
        if self.rclient is None or fault_named():
            return
        lab_redis = self.own_redis or self.rclient
        with contextlib.suppress(Exception):
            keys = [k async for k in lab_redis.scan_iter(match=f"{self.prefix}*", count=1000)]
            if keys:
                await lab_redis.delete(*keys)
        with contextlib.suppress(Exception):
            await self.rclient.aclose()
        if self.own_redis is not None and self.own_redis is not self.rclient:
            with contextlib.suppress(Exception):
                await self.own_redis.aclose()

    async def drop_database(self) -> None:
        """Drop the run's database once its backends are gone; close the admin connection."""
        admin = self.admin
        if admin is None:
            return
        if self.created:
            with contextlib.suppress(Exception):
                # the backends just closed, waited for until they are gone: DROP
                # DATABASE would otherwise find them still exiting and retry 100 ms later
                await admin.execute(GONE, self.database, timeout=teardown_s(10))
            with contextlib.suppress(Exception):
                await admin.execute(
                    f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)',
                    timeout=teardown_s(60),
                )
        with contextlib.suppress(Exception):
            await admin.close(timeout=teardown_s(10))
        admin.terminate()
