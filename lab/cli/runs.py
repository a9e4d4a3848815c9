"""Running scenarios: run and compare."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any

import typer

from lab.cli.base import _tables, app, err, guarded, out
from lab.cli.options import (
    Actors,
    ActorTimeout,
    Arrival,
    AsJson,
    Case,
    Connect,
    DeadlockTimeout,
    NoRecord,
    Params,
    PgDsn,
    PgVersion,
    Procs,
    RedisClient,
    RedisUrl,
    RedisVersion,
    Rtt,
    RunTimeout,
    ScenarioId,
    Seed,
    _in_catalogue,
    find_scenario,
    plan_for,
    servers_for,
    variants_of,
)
from lab.core.results import results_root
from lab.load.runner import run_plan
from lab.output import console as report
from lab.output import timeline


@app.command()
def run(
    scenario: ScenarioId,
    variant: Annotated[
        str,
        typer.Option("--variant", "-v", help="buggy, fixed, any variant, a comma list, or all."),
    ] = "all",
    n: Actors = None,
    arrival: Arrival = None,
    connect: Connect = None,
    deadlock_timeout: DeadlockTimeout = None,
    seed: Seed = 1,
    case: Case = None,
    rtt: Rtt = None,
    actor_timeout: ActorTimeout = None,
    run_timeout: RunTimeout = None,
    param: Params = None,
    pg_dsn: PgDsn = None,
    redis_url: RedisUrl = None,
    as_json: AsJson = False,
    no_record: NoRecord = False,
    pg_version: PgVersion = None,
    redis_version: RedisVersion = None,
    procs: Procs = None,
    redis_client: RedisClient = None,
) -> None:
    """Run a scenario's variants with the same knobs and print them beside the published numbers."""
    args = dict(locals())
    from lab.core.loader import is_folder, scenario_files

    if is_folder(scenario) and not _in_catalogue(scenario):  # a folder: each file in turn
        for path in guarded(lambda: scenario_files(scenario)):
            run(**{**args, "scenario": str(path)})
        return

    def body() -> None:
        sc = find_scenario(scenario)
        plan = plan_for(
            sc,
            variants_of(sc, variant),
            "published",
            case,
            param,
            not no_record,
            n=n,
            arrival=arrival,
            connect=connect,
            deadlock_timeout=deadlock_timeout,
            seed=seed,
            actor_timeout=actor_timeout,
            run_timeout=run_timeout,
            rtt=rtt,
            procs=procs,
            redis_client=redis_client,
        )
        chosen = list(plan.variants)
        console = out()
        log = err()
        # In a terminal the result lines go above the progress bar (through the console
        # that draws it), or the bar's redraws would erase them; piped, they go to stdout.
        lines = log if console.is_terminal and log.is_terminal else console

        with servers_for(
            [sc], pg_dsn, redis_url, plan.knobs.connect, pg_version, redis_version
        ) as srv:
            report.servers(log, srv.infos(), srv.notes)
            with report.DelayedProgress(log, len(chosen)) as bar:
                bar.describe(f"{sc.id}: {chosen[0]} (n={plan.knobs.n})")

                def on_record(rec: dict[str, Any]) -> None:
                    if not as_json:
                        lines.print(report.result_line(rec), markup=False, soft_wrap=True)
                    i = chosen.index(rec["variant"]) + 1
                    bar.advance(f"{sc.id}: {chosen[i]}" if i < len(chosen) else sc.id)

                records = asyncio.run(run_plan(plan, srv, on_record))
        if as_json:  # after every variant ran: claims comparing variants are in every record
            for rec in records:
                sys.stdout.write(json.dumps(rec, default=str) + "\n")
        else:
            report.results_table(console, records)
            for rec in records:  # scenarios with a lease timeline: belief vs Redis
                timeline.render(console, rec)
            report.claims_table(console, records)
            if plan.write:
                console.print(f"[dim]records: {results_root() / plan.run_id}/[/dim]")

    guarded(body)


@app.command()
def compare(
    scenario: ScenarioId,
    n: Actors = None,
    arrival: Arrival = None,
    connect: Connect = None,
    deadlock_timeout: DeadlockTimeout = None,
    seed: Seed = 1,
    actor_timeout: ActorTimeout = None,
    run_timeout: RunTimeout = None,
    param: Params = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Start from verify's quick sizes, not the published.")
    ] = False,
    case: Case = None,
    rtt: Rtt = None,
    pg_dsn: PgDsn = None,
    redis_url: RedisUrl = None,
    as_json: AsJson = False,
    no_record: NoRecord = False,
    pg_version: PgVersion = None,
    redis_version: RedisVersion = None,
    procs: Procs = None,
    redis_client: RedisClient = None,
) -> None:
    """Run every variant with the same knobs: one table, beside the published numbers."""

    def body() -> None:
        sc = find_scenario(scenario)
        plan = plan_for(
            sc,
            list(sc.variants),
            "quick" if quick else "published",
            case,
            param,
            not no_record,
            n=n,
            arrival=arrival,
            connect=connect,
            deadlock_timeout=deadlock_timeout,
            seed=seed,
            actor_timeout=actor_timeout,
            run_timeout=run_timeout,
            rtt=rtt,
            procs=procs,
            redis_client=redis_client,
        )
        knobs, variants = plan.knobs, list(plan.variants)
        log = err()
        with servers_for([sc], pg_dsn, redis_url, knobs.connect, pg_version, redis_version) as srv:
            report.servers(log, srv.infos(), srv.notes)
            with report.DelayedProgress(log, len(variants)) as bar:
                bar.describe(f"{sc.id}: {variants[0]} (n={knobs.n})")

                def on_record(rec: dict[str, Any]) -> None:
                    i = variants.index(rec["variant"]) + 1
                    bar.advance(f"{sc.id}: {variants[i]}" if i < len(variants) else sc.id)

                records = asyncio.run(run_plan(plan, srv, on_record))
        if as_json:
            for rec in records:
                sys.stdout.write(json.dumps(rec, default=str) + "\n")
            return
        console = _tables()
        report.compare_table(console, records)
        report.claims_table(console, records)
        if plan.write:
            console.print(f"[dim]records: {results_root() / plan.run_id}/[/dim]")

    guarded(body)
