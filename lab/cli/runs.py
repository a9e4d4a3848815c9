"""Running scenarios: run and compare. Both take LoadOptions (lab/cli/options.py) and run
their plan through `_records`; they differ in the variants and in what they print."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Annotated

import typer
from rich.console import Console

from lab.cli.base import _tables, app, err, guarded, out
from lab.cli.options import (
    LoadOptions,
    ScenarioId,
    _in_catalogue,
    find_scenario,
    load_options,
    plan_for,
    servers_for,
    variants_of,
)
from lab.core.profiles import PUBLISHED, QUICK, Profile
from lab.core.records import Record
from lab.core.results import results_root
from lab.core.scenario import Scenario
from lab.load.runner import run_plan
from lab.output import console as report
from lab.output import timeline


def _records(
    sc: Scenario, variants: Sequence[str], profile: Profile, o: LoadOptions, lines: Console | None
) -> tuple[list[Record], bool, str]:
    """Run the plan on its servers with a progress bar on stderr; each record's result
    line to `lines` as it comes (None: no lines). The records, whether they were written,
    and the run id."""
    plan = plan_for(sc, variants, profile, o)
    chosen, log = list(plan.variants), err()
    with servers_for(
        [sc], o.pg_dsn, o.redis_url, plan.knobs.connect, o.pg_version, o.redis_version
    ) as srv:
        report.servers(log, srv.infos(), srv.notes)
        with report.DelayedProgress(log, len(chosen)) as bar:
            bar.describe(f"{sc.id}: {chosen[0]} (n={plan.knobs.n})")

            def on_record(rec: Record) -> None:
                if lines is not None:
                    lines.print(report.result_line(rec), markup=False, soft_wrap=True)
                i = chosen.index(rec["variant"]) + 1
                bar.advance(f"{sc.id}: {chosen[i]}" if i < len(chosen) else sc.id)

            records = asyncio.run(run_plan(plan, srv, on_record))
    return records, plan.write, plan.run_id


def _json_lines(records: Sequence[Record]) -> None:
    for rec in records:  # after every variant ran: claims comparing variants are in each
        sys.stdout.write(json.dumps(rec, default=str) + "\n")


@app.command()
@load_options
def run(
    scenario: ScenarioId,
    variant: Annotated[
        str,
        typer.Option("--variant", "-v", help="buggy, fixed, any variant, a comma list, or all."),
    ] = "all",
    *,
    o: LoadOptions,
) -> None:
    """Run a scenario's variants with the same knobs and print them beside the published numbers."""
    from lab.core.loader import is_folder, scenario_files

    if is_folder(scenario) and not _in_catalogue(scenario):  # a folder: each file in turn
        for path in guarded(lambda: scenario_files(scenario)):
            _run(str(path), variant, o)
        return
    _run(scenario, variant, o)


def _run(scenario: str, variant: str, o: LoadOptions) -> None:
    def body() -> None:
        sc = find_scenario(scenario)
        console, log = out(), err()
        # In a terminal the result lines go above the progress bar (through the console
        # that draws it), or the bar's redraws would erase them; piped, they go to stdout.
        lines = log if console.is_terminal and log.is_terminal else console
        records, written, run_id = _records(
            sc, variants_of(sc, variant), PUBLISHED, o, None if o.as_json else lines
        )
        if o.as_json:
            _json_lines(records)
            return
        report.results_table(console, records)
        for rec in records:  # scenarios with a lease timeline: belief vs Redis
            timeline.render(console, rec)
        report.claims_table(console, records)
        if written:
            console.print(f"[dim]records: {results_root() / run_id}/[/dim]")

    guarded(body)


@app.command()
@load_options
def compare(
    scenario: ScenarioId,
    quick: Annotated[
        bool, typer.Option("--quick", help="Start from verify's quick sizes, not the published.")
    ] = False,
    *,
    o: LoadOptions,
) -> None:
    """Run every variant with the same knobs: one table, beside the published numbers."""

    def body() -> None:
        sc = find_scenario(scenario)
        profile = QUICK if quick else PUBLISHED
        records, written, run_id = _records(sc, list(sc.variants), profile, o, None)
        if o.as_json:
            _json_lines(records)
            return
        console = _tables()
        report.compare_table(console, records)
        report.claims_table(console, records)
        if written:
            console.print(f"[dim]records: {results_root() / run_id}/[/dim]")

    guarded(body)
