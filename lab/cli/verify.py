"""Judging claims and reading records: verify, results, diff, report."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from lab.cli.base import _tables, app, err, guarded, out
from lab.cli.options import (
    PgDsn,
    PgVersion,
    RedisUrl,
    RedisVersion,
    find_scenarios,
    servers_for,
)
from lab.core.results import results_root
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.output import console as report
from lab.verify.lanes import QUICK_LANES


@app.command()
def verify(
    scenarios: Annotated[
        list[str] | None,
        typer.Argument(help="Scenario ids, files or folders (default: the whole catalogue)."),
    ] = None,
    profile: Annotated[
        str, typer.Option(help="quick (shape, about a minute) | published (the documents' sizes).")
    ] = "quick",
    seed: Annotated[int, typer.Option(help="Seed of the first trial; trial k uses seed+k-1.")] = 1,
    trials: Annotated[
        int | None,
        typer.Option(help="Judge every claim over this many trials instead of its own count."),
    ] = None,
    recorded: Annotated[
        str | None,
        typer.Option(help="Judge a recorded run (id or folder) again instead of running."),
    ] = None,
    pg_dsn: PgDsn = None,
    redis_url: RedisUrl = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="The verdicts as one JSON document on stdout.")
    ] = False,
    no_record: Annotated[bool, typer.Option("--no-record", help="Write no records.")] = False,
    pg_version: PgVersion = None,
    redis_version: RedisVersion = None,
    matrix: Annotated[
        bool,
        typer.Option(
            "--matrix", help="Judge the claims on every server version here: claims x versions."
        ),
    ] = False,
    lanes: Annotated[
        str,
        typer.Option(
            help=f"Runs side by side in lane processes: auto (quick: {QUICK_LANES}, published: 1) "
            "or K."
        ),
    ] = "auto",
    counterfactual: Annotated[
        bool,
        typer.Option(
            "--counterfactual",
            help="Also run the variants each claim's counterfactual reads, and exit 1 if a "
            "claim holds on its counterfactual too (it cannot fail).",
        ),
    ] = False,
) -> None:
    """Re-run scenarios and judge every documented claim; exit 1 if one does not hold."""

    def body() -> None:
        import time

        from lab.core.profiles import check_profile, profile_settings
        from lab.load.databases import drop_spares
        from lab.output.verdicts import print_summary, print_verdicts
        from lab.verify import steps
        from lab.verify.command import run_verify, runnable, verify_recorded_run
        from lab.verify.lanes import lanes_for, parse_lanes
        from scenarios import SCENARIOS

        check_profile(profile)
        if trials is not None and trials < 1:
            raise LabError(f"--trials {trials}: must be at least 1")
        want = parse_lanes(lanes, profile)
        chosen = [sc for s in scenarios or [] for sc in find_scenarios(s)] or list(SCENARIOS)
        started = time.perf_counter()
        log = err()
        if matrix:
            if any((recorded, pg_dsn, redis_url, pg_version, redis_version)):
                raise LabError(
                    "verify --matrix starts every server version itself: it takes no "
                    "--recorded, --pg-dsn, --redis-url, --pg-version or --redis-version"
                )
            _verify_matrix(chosen, profile, seed, trials, not no_record, as_json)
            return
        if recorded is not None:
            only = [s.id for s in chosen] if scenarios else []
            vr = verify_recorded_run(
                recorded, profile, SCENARIOS, only=only, trials=trials, started=started
            )
        else:
            chosen, not_run = runnable(chosen, profile, pg_dsn)
            if not chosen:  # asked for only what this machine cannot run
                raise LabError(not_run[0].missing)
            for r in not_run:
                log.print(f"locklab: {r.scenario} not judged: {r.missing}", markup=False)
            total = sum(steps(s, profile, trials, counterfactual) for s in chosen)
            modes = [profile_settings(s, profile)[0].connect for s in chosen]
            bouncer = next((m for m in modes if m.startswith("pgbouncer-")), "")
            with servers_for(chosen, pg_dsn, redis_url, bouncer, pg_version, redis_version) as srv:
                report.servers(log, srv.infos(), srv.notes)
                # the spare database the last run made for one that did not come, before
                # the servers stop (kept or external ones would keep it)
                srv.stops.append(lambda: asyncio.run(drop_spares(srv)))
                width, why = lanes_for(want, chosen, srv)
                if why:
                    log.print(f"locklab: one lane: {why}", markup=False)
                with report.DelayedProgress(log, total) as bar:
                    vr = run_verify(
                        chosen,
                        profile,
                        srv,
                        SCENARIOS,
                        lanes=width,
                        progress=bar,
                        say=lambda line: log.print(line, markup=False),
                        seed=seed,
                        trials=trials,
                        write=not no_record,
                        counterfactual=counterfactual,
                        started=started,
                        not_run=not_run,
                    )
        if as_json:
            sys.stdout.write(json.dumps(vr.to_json(), default=str) + "\n")
        else:
            console = _tables()
            print_verdicts(console, vr.results)
            console.print(vr.coverage, markup=False)
            if vr.run_id and not no_record:
                console.print(f"[dim]records: {results_root() / vr.run_id}/[/dim]")
            print_summary(console, vr.summary, vr.wall_s, lanes=vr.lanes)
        if not vr.summary.ok or (counterfactual and vr.summary.cannot_fail):
            raise typer.Exit(1)

    guarded(body)


def _verify_matrix(
    chosen: list[Scenario],
    profile: str,
    seed: int,
    trials: int | None,
    write: bool,
    as_json: bool,
) -> None:
    """verify --matrix: claims x server versions (lab/verify/matrix.py); exit 1 if a claim does
    not hold on some version, as verify does."""
    import time

    from lab.core.results import new_run_id
    from lab.output.matrix import print_matrix
    from lab.verify import summarize
    from lab.verify.matrix import columns, run_matrix

    started = time.perf_counter()
    cols = columns(chosen)
    run_id = new_run_id()
    log = err()
    log.print("matrix columns: " + ", ".join(c.label for c in cols), markup=False)
    with log.status("verify --matrix ...") as status:

        def on_column(col: Any, i: int) -> None:
            status.update(f"verify --matrix: {col.label} ({i + 1}/{len(cols)})")

        def on_step(text: str) -> None:
            status.update(f"verify --matrix: {text}")

        m = run_matrix(
            chosen,
            profile,
            cols,
            run_id=run_id,
            seed=seed,
            trials=trials,
            write=write,
            on_column=on_column,
            on_step=on_step,
        )
    wall = time.perf_counter() - started
    if as_json:
        sys.stdout.write(
            json.dumps({"run_id": run_id, "wall_s": round(wall, 1), **m.to_json()}) + "\n"
        )
    else:
        console = _tables()
        print_matrix(console, m)
        if write:
            console.print(f"[dim]records: {results_root() / run_id}/[/dim]")
        console.print(f"matrix: {len(cols)} server builds in {wall:.1f} s", markup=False)
    if not all(summarize(r, profile).ok for r in m.results.values()):
        raise typer.Exit(1)


@app.command("results")
def results_cmd(
    limit: Annotated[int, typer.Option(help="Show at most this many runs.")] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="The listing as JSON.")] = False,
) -> None:
    """List recorded runs under results/ (newest first)."""

    def body() -> None:
        from lab.output.diff import list_summaries
        from lab.output.runs import print_runs

        if limit < 1:
            raise LabError(f"--limit {limit}: show at least one run")
        summaries = list_summaries(limit=limit)
        if as_json:
            sys.stdout.write(json.dumps(summaries, default=str) + "\n")
        else:
            print_runs(_tables(), summaries)

    guarded(body)


@app.command()
def diff(
    run_a: Annotated[str, typer.Argument(help="Run id or folder (A, e.g. before).")],
    run_b: Annotated[str, typer.Argument(help="Run id or folder (B, e.g. after).")],
    show_all: Annotated[bool, typer.Option("--all", help="Show unchanged fields too.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The diff as JSON.")] = False,
) -> None:
    """Compare two recorded runs: knobs, servers, outcomes, timings, evidence, claim verdicts."""

    def body() -> None:
        from lab.core.results import load_run, run_folder
        from lab.output.diff import diff_runs
        from lab.output.runs import print_diff

        fa, fb = run_folder(run_a), run_folder(run_b)
        d = diff_runs(load_run(str(fa)), load_run(str(fb)), fa.name, fb.name)
        if as_json:
            sys.stdout.write(json.dumps(d.to_json(), default=str) + "\n")
        else:
            print_diff(_tables(), d, show_all=show_all)

    guarded(body)


@app.command("report")
def report_cmd(
    run: Annotated[str, typer.Argument(help="Run id or folder (see `locklab results`).")],
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Default: <run folder>/report.html.")
    ] = None,
) -> None:
    """Write one self-contained HTML page with charts for a recorded run."""

    def body() -> None:

        from lab.output.report import write_report

        path = write_report(run, Path(output) if output else None)
        out().print(f"wrote {path}", markup=False)

    guarded(body)
