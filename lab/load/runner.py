"""One scenario × variant run: fresh database, setup, load, invariants, evidence, record."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from lab.aio import within
from lab.core.claims import judge_all
from lab.core.knobs import Knobs, connections_needed, server_connections_needed
from lab.core.outcome import TIMEOUT, notation, ordered
from lab.core.profiles import claims_for_run
from lab.core.provenance import lab_info
from lab.core.records import Record
from lab.core.results import SCHEMA_VERSION, write_record
from lab.core.scenario import (
    Actor,
    Env,
    Observer,
    Scenario,
    Script,
    check_params,
    start_observers,
    stop_observers,
)
from lab.errors import LabError, ScenarioFailure
from lab.load.databases import (
    GONE,
    SPARES,
    admin_connect,
    create_database,
    create_statement,
    database_name,
    drop_made,
    probe_pg,
    server_key,
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
from lab.load.redisclients import PIPELINED_CONNECTIONS, REDIS_OBSERVERS, redis_client
from lab.load.shard import resolve_procs
from lab.load.workload import hard_limit, percentiles, run_actors
from lab.servers import Servers
from lab.servers.base import with_database
from lab.servers.faults import check_resources, fault_named, guard_variant, teardown_s

ADMIN_CONNECTIONS = 4  # the run database's own small pool, plus the admin connection
# run_plan makes the next variant's database on a connection of its own while a variant
# runs, when the run leaves this many of the server's connections free besides its own
PREPARE_HEADROOM = 20
MAX_TRACE = 5000


@dataclass
class RunPlan:
    scenario: Scenario
    variants: Sequence[str]
    knobs: Knobs
    params: Mapping[str, Any]
    run_id: str
    write: bool = True
    case: str = ""  # one of the scenario's cases the knobs and params start from
    spare_after: bool = False  # make an empty database for the plan that follows (verify)


async def run_plan(
    plan: RunPlan, servers: Servers, on_record: Callable[[Record], None] | None = None
) -> list[Record]:
    """Run every variant of the plan with the same knobs; judge claims; write records."""
    check_params(plan.scenario, plan.knobs.n, plan.params)
    records: dict[str, Record] = {}
    ahead: dict[str, asyncio.Task[str]] = {}  # the next variant's database, made meanwhile
    spare: asyncio.Task[str] | None = None  # the next plan's, made during the last variant
    try:
        for i, variant in enumerate(plan.variants):
            following = plan.variants[i + 1] if i + 1 < len(plan.variants) else None
            if following is not None and _made_ahead(plan, servers):
                name = database_name(plan.run_id, plan.scenario.id, following)
                ahead[following] = asyncio.create_task(
                    create_database(servers, name, plan.knobs.deadlock_timeout_ms), name=name
                )
            elif following is None and plan.spare_after and _made_ahead(plan, servers):
                name = database_name(plan.run_id, plan.scenario.id, "spare")
                spare = asyncio.create_task(
                    create_database(servers, name, plan.knobs.deadlock_timeout_ms), name=name
                )
            await _plan_variant(
                plan, variant, servers, records, on_record, ahead.pop(variant, None)
            )
        if spare is not None:
            task, spare = spare, None
            try:
                SPARES.setdefault(server_key(servers), []).append(await task)
            except Exception:
                await drop_made(servers, task)
    finally:
        for task in ahead.values():  # made for a variant that did not run: dropped
            await drop_made(servers, task)
        if spare is not None:
            await drop_made(servers, spare)
    if plan.write:  # claims that compare variants are known only now
        for rec in records.values():
            write_record(rec)
    return list(records.values())


def pg_connections(sc: Scenario, knobs: Knobs) -> int:
    """PostgreSQL server connections one variant of `sc` takes under `knobs` (0: no PG)."""
    if "pg" not in sc.uses:
        return 0
    if sc.kind == "actors":
        need = server_connections_needed(knobs.connect, knobs.n)
    else:
        need = sc.script_connections(knobs.n) if sc.script_connections is not None else 0
    return need + ADMIN_CONNECTIONS


def _made_ahead(plan: RunPlan, servers: Servers) -> bool:
    """Whether the next variant's database can be made during this one: PostgreSQL is
    used and the run leaves room for one more connection."""
    if "pg" not in plan.scenario.uses or servers.pg is None:
        return False
    need = pg_connections(plan.scenario, plan.knobs)
    return need + PREPARE_HEADROOM <= servers.pg.max_connections


async def _plan_variant(
    plan: RunPlan,
    variant: str,
    servers: Servers,
    records: dict[str, Record],
    on_record: Callable[[Record], None] | None,
    made: asyncio.Task[str] | None,
) -> None:
    try:
        rec = await run_variant(plan, variant, servers, made)
    except BaseException:
        if made is not None:
            await drop_made(servers, made)
        raise
    records[variant] = rec
    _attach_claims(plan, records)
    if plan.write:
        write_record(rec)
    if on_record is not None:
        on_record(rec)


def _attach_claims(plan: RunPlan, records: dict[str, Record]) -> None:
    """The verdicts of the claims these settings are made for; the others, with why not."""
    claims, not_judged = claims_for_run(plan.scenario, plan.knobs, plan.params, plan.case)
    verdicts = judge_all(tuple(claims), records)
    judged = {(v["id"], v["text"]) for v in verdicts}
    for v in [v for v in verdicts if v.get("not_judged")]:  # the check said why not
        verdicts.remove(v)
        not_judged.append(
            {"id": v["id"], "text": v["text"], "variants": v["variants"], "why": v["measured"]}
        )
    for c in claims:
        if (c.id, c.text) in judged:
            continue
        missing = [v for v in c.variants if v not in records]
        why = (
            f"needs the {', '.join(missing)} variant(s) too"
            if missing
            else "these settings do not exercise it"
        )
        not_judged.append({"id": c.id, "text": c.text, "variants": list(c.variants), "why": why})
    chance = {(c.id, c.text): c for c in claims if c.trials > 1}
    for v in verdicts:
        if r := chance.get((v["id"], v["text"])):  # one run here; verify judges several
            v["note"] = f"1 run here; verify needs {r.needed(r.trials)} of {r.trials} trials"
    for variant, rec in records.items():
        rec["claims"] = [v for v in verdicts if variant in v["variants"]]
        rec["claims_not_judged"] = [n for n in not_judged if variant in n["variants"]]


async def run_variant(
    plan: RunPlan, variant: str, servers: Servers, made: asyncio.Task[str] | None = None
) -> Record:
    """One variant's record. Anything a scenario raises that is neither bad input (LabError)
    nor a declared failure becomes a ScenarioFailure naming scenario and variant.
    `made`: its database, being created already (run_plan makes the next one meanwhile)."""
    try:
        check_resources(_sockets_needed(plan), plan.knobs.n)
        during = f"{plan.scenario.id} / {variant}"
        return await guard_variant(_run_variant(plan, variant, servers, made), servers, during)
    except (LabError, ScenarioFailure):
        raise
    except Exception as exc:
        raise ScenarioFailure(
            f"{plan.scenario.id} / {variant}: {type(exc).__name__}: {exc}"
        ) from exc


def _sockets_needed(plan: RunPlan) -> int:
    """Connections the lab process itself opens for one variant (one file each)."""
    scenario, knobs = plan.scenario, plan.knobs
    need = 0
    if "pg" in scenario.uses:
        opens = scenario.script_connections
        need += ADMIN_CONNECTIONS + (
            connections_needed(knobs.connect, knobs.n)
            if scenario.kind == "actors"
            else (opens(knobs.n) if opens is not None else 0)
        )
    if "redis" in scenario.uses:
        need += connections_needed(knobs.connect, knobs.n) + 16
    return need


async def _run_variant(
    plan: RunPlan, variant: str, servers: Servers, made: asyncio.Task[str] | None = None
) -> Record:
    scenario, knobs = plan.scenario, plan.knobs
    if variant not in scenario.variants:
        raise LabError(f"{scenario.id} has no variant {variant!r} ({', '.join(scenario.variants)})")
    uses_pg = "pg" in scenario.uses
    uses_redis = "redis" in scenario.uses
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    database = database_name(plan.run_id, scenario.id, variant)
    admin: asyncpg.Connection | None = None
    pool: asyncpg.Pool | None = None
    rclient: Any = None  # env.redis: the actors' and setup's (through the --rtt proxy)
    own_redis: Any = None  # the lab's own: INFO, commandstats, cleanup; never delayed
    links = Links()
    network: dict[str, Any] = {}
    dsn = ""
    created = False
    prefix = f"locklab:{plan.run_id}:{variant}:"
    env: Env | None = None
    commands: Any = None
    load: dict[str, Any] = {}
    observed: list[Observer] = []
    try:
        if uses_pg:
            admin = await admin_connect(servers)
            free = await probe_pg(admin, servers)
            if scenario.kind == "actors":
                need = ADMIN_CONNECTIONS + server_connections_needed(knobs.connect, knobs.n)
                how, fix = f" with --connect {knobs.connect}", "--connect pool:<size> or "
            else:  # a script opens its own sessions; --connect does not apply
                opens = scenario.script_connections
                need = ADMIN_CONNECTIONS + (opens(knobs.n) if opens is not None else 0)
                how, fix = "", ""
            if need > free:
                raise LabError(
                    f"-n {knobs.n}{how} needs {need} PostgreSQL connections; the server "
                    f"accepts {free} more "
                    f"(max_connections={servers.pg.max_connections if servers.pg else '?'}); "
                    f"use {fix}a smaller -n"
                )
            if made is not None:
                created = True  # dropped below whatever happens
                await made
            elif await take_spare(admin, servers, database):
                created = True
                await admin.execute(
                    f"ALTER DATABASE \"{database}\" SET deadlock_timeout = '{int(knobs.deadlock_timeout_ms)}ms'"
                )
            else:
                await admin.execute(create_statement(servers, database))
                created = True
                await admin.execute(
                    f"ALTER DATABASE \"{database}\" SET deadlock_timeout = '{int(knobs.deadlock_timeout_ms)}ms'"
                )
            assert servers.pg is not None
            dsn = servers.pg.dsn
            pool = await asyncpg.create_pool(
                dsn, database=database, min_size=1, max_size=ADMIN_CONNECTIONS - 1
            )
        procs = resolve_procs(scenario, knobs)
        links = open_links(servers, scenario, knobs)  # --rtt's proxies for Redis, PgBouncer
        if uses_redis:
            # One Redis connection per actor (or the --connect pool size), plus observers;
            # pipelined, or with the actors in worker processes, the observers' only.
            actors_here = 0 if procs > 1 else connections_needed(knobs.connect, knobs.n)
            rclient = await redis_client(
                servers,
                (actors_here if knobs.redis_client == "pooled" else 0) + REDIS_OBSERVERS,
                links.redis_url,
            )
            own_redis = await redis_client(servers, REDIS_OBSERVERS) if links.redis_ms else rclient
            if knobs.redis_client == "pipelined" and procs == 1:
                from lab.kit.autopipe import AutoPipeline

                commands = await AutoPipeline.connect(links.redis_url, PIPELINED_CONNECTIONS)
        env = Env(
            scenario=scenario.id,
            variant=variant,
            dsn=with_database(dsn, database) if dsn else "",
            database=database,
            db=pool,
            redis=rclient,
            prefix=prefix,
            params=plan.params,
            seed=knobs.seed,
            n=knobs.n,
            redis_url=servers.redis.url if (uses_redis and servers.redis) else "",
            actors_redis_url=links.redis_url if uses_redis else "",
            pgbouncer={m: with_database(d, database) for m, d in links.pgbouncer.items()},
        )
        env.commands = commands
        if scenario.schema is not None:  # a fresh database: the DDL, then the rows
            await scenario.schema(env)
        if scenario.setup is not None:
            await scenario.setup(env)
        if scenario.worker_setup is not None and procs == 1:
            await scenario.worker_setup(env)
        network = await links.measure(env, own_redis, knobs)  # before the clock
        observed = await start_observers(scenario.observers, env)
        log_offset = servers.pg.log_size() if (uses_pg and servers.pg) else 0
        stat_before = await pg_deadlocks(admin, database) if admin else 0
        redis_before = await own_redis.info("commandstats") if own_redis else {}

        latencies: dict[str, list[float]] = {}
        machine0 = machine_window()
        if scenario.kind == "actors":
            actor: Actor = scenario.variants[variant]
            cpu0 = time.process_time()
            if procs > 1:
                from lab.load.shard import run_sharded

                res, load = await run_sharded(env, scenario, variant, knobs, procs, uses_pg=uses_pg)
            else:
                res = await run_actors(env, actor, knobs, uses_pg=uses_pg)
                if scenario.worker_done is not None:
                    await scenario.worker_done(env)
            load = load_facts(knobs, procs, time.process_time() - cpu0, load)
            outcomes, wall_ms, latencies = res.outcomes, res.wall_ms, res.latencies_ms
            env.outcomes = outcomes
        else:
            script: Script = scenario.variants[variant]
            env.t0 = time.perf_counter()
            try:
                await hard_limit(script(env), knobs.run_timeout_s)
            except TimeoutError:
                env.outcome(TIMEOUT)
            wall_ms = (time.perf_counter() - env.t0) * 1000
            outcomes = env.outcomes
        machine = machine_window(machine0)
        unexpected = set(outcomes) - set(scenario.outcomes) - {TIMEOUT}
        if unexpected:
            raise ScenarioFailure(
                f"{scenario.id} / {variant}: undeclared outcome(s) {sorted(unexpected)} "
                f"in {notation(outcomes)}"
            )

        await stop_observers(observed, env)
        checks = await scenario.invariant(env) if scenario.invariant else []
        evidence: dict[str, Any] = dict(env.extra_evidence)
        if network:  # Redis's and PgBouncer's links, beside what the actors' PostgreSQL paid
            evidence["network"] = {**evidence.get("network", {}), **network}
        evidence["machine"] = machine
        if uses_pg and admin is not None and servers.pg is not None:
            evidence["pg_stat_deadlocks"] = await deadlocks_since(
                admin, database, stat_before, outcomes.get("40P01", 0)
            )
            log = servers.pg.read_log(log_offset)
            evidence["deadlocks"] = (
                summarize_deadlocks(parse_deadlocks(log, database)) if log is not None else None
            )
            if log is not None and (waits := parse_lock_waits(log, database)):
                evidence["lock_waits"] = waits  # sessions that SET log_lock_waits = on
        if own_redis is not None:
            evidence["redis_commandstats"] = commandstats_delta(
                redis_before, await own_redis.info("commandstats")
            )
        record: Record = {  # typed: mypy checks every key claims will read
            "schema": SCHEMA_VERSION,
            "run_id": plan.run_id,
            "scenario": scenario.id,
            "variant": variant,
            "title": scenario.title,
            "started_at": started_at,
            "knobs": knobs.to_json(),
            "params": dict(plan.params),
            "servers": {i.product: i.to_json() for i in servers.infos()},
            "lab": lab_info(),
            "outcomes": ordered(outcomes, scenario.outcomes),
            "wall_ms": round(wall_ms, 1),
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
    finally:
        if observed and env is not None:  # the variant failed: stop what watches it
            with contextlib.suppress(Exception):
                await stop_observers(observed, env)
        if commands is not None:
            with contextlib.suppress(Exception):
                await commands.aclose()
        for conn in env.connections if env is not None else []:
            if not conn.is_closed():
                conn.terminate()
        for cleanup in reversed(env.cleanups if env is not None else []):
            with contextlib.suppress(Exception):
                await asyncio.to_thread(cleanup)
        if pool is not None:
            with contextlib.suppress(Exception):
                await within(pool.close(), teardown_s(5))
            pool.terminate()
        # Once a server is named at fault, Redis is not waited on (a stopped one never
        # answers; wait_for cannot bound redis-py, which may swallow the cancellation).
        if rclient is not None and not fault_named():
            lab_redis = own_redis or rclient
            with contextlib.suppress(Exception):
                keys = [k async for k in lab_redis.scan_iter(match=f"{prefix}*", count=1000)]
                if keys:
                    await lab_redis.delete(*keys)
            with contextlib.suppress(Exception):
                await rclient.aclose()
            if own_redis is not None and own_redis is not rclient:
                with contextlib.suppress(Exception):
                    await own_redis.aclose()
        links.close()  # the --rtt proxies and PgBouncer, by PID
        if admin is not None:
            if created:
                with contextlib.suppress(Exception):
                    # the backends just closed, waited for until they are gone: DROP
                    # DATABASE would otherwise find them still exiting and retry 100 ms later
                    await admin.execute(GONE, database, timeout=teardown_s(10))
                with contextlib.suppress(Exception):
                    await admin.execute(
                        f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)', timeout=teardown_s(60)
                    )
            with contextlib.suppress(Exception):
                await admin.close(timeout=teardown_s(10))
            admin.terminate()
