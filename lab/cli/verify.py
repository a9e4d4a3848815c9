"""Judging claims and reading records: verify, results, diff, report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from lab.cli.base import _tables, app, err, guarded, out
from lab.cli.options import PgDsn, PgVersion, RedisUrl, RedisVersion, find_scenarios
from lab.core.results import results_root
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.output import console as report
from lab.servers import Servers
from lab.verify.command import VerifyOptions, VerifyRun, verify_command
from lab.verify.lanes import QUICK_LANES

ScenarioNames = Annotated[
    list[str] | None,
    typer.Argument(help="Scenario ids, files or folders (default: the whole catalogue)."),
]
ProfileName = Annotated[
    str, typer.Option(help="quick (shape, about a minute) | published (the documents' sizes).")
]
FirstSeed = Annotated[int, typer.Option(help="Seed of the first trial; trial k uses seed+k-1.")]
TrialCount = Annotated[
    int | None,
    typer.Option(help="Judge every claim over this many trials instead of its own count."),
]
RecordedRun = Annotated[
    str | None,
    typer.Option(help="Judge a recorded run (id or folder) again instead of running."),
]
VerdictsAsJson = Annotated[
    bool, typer.Option("--json", help="The verdicts as one JSON document on stdout.")
]
NoRecords = Annotated[bool, typer.Option("--no-record", help="Write no records.")]
VersionMatrix = Annotated[
    bool,
    typer.Option(
        "--matrix", help="Judge the claims on every server version here: claims x versions."
    ),
]
LaneCount = Annotated[
    str,
    typer.Option(
        help=f"Runs side by side in lane processes: auto (quick: {QUICK_LANES}, published: 1) or K."
    ),
]
Counterfactual = Annotated[
    bool,
    typer.Option(
        "--counterfactual",
        help="Also run the variants each claim's counterfactual reads, print the counts "
        "by kind (run, level, code-mutation, record-edit, none) last, and exit 1 if a claim "
        "holds on its counterfactual too (it cannot fail) or has none outside a declared gap.",
    ),
]


@app.command()
def verify(
    scenarios: ScenarioNames = None,
    profile: ProfileName = "quick",
    seed: FirstSeed = 1,
    trials: TrialCount = None,
    recorded: RecordedRun = None,
    pg_dsn: PgDsn = None,
    redis_url: RedisUrl = None,
    as_json: VerdictsAsJson = False,
    no_record: NoRecords = False,
    pg_version: PgVersion = None,
    redis_version: RedisVersion = None,
    matrix: VersionMatrix = False,
    lanes: LaneCount = "auto",
    counterfactual: Counterfactual = False,
) -> None:
    """Re-run scenarios and judge every documented claim; exit 1 if one does not hold."""

    def body() -> None:
        from lab.core.profiles import Profile
        from lab.verify.lanes import parse_lanes
        from scenarios import SCENARIOS

        resolved = Profile.of(profile)  # once: what runs below is given the value
        if trials is not None and trials < 1:
            raise LabError(f"--trials {trials}: must be at least 1")
        want = parse_lanes(lanes, resolved)
        chosen = [sc for s in scenarios or [] for sc in find_scenarios(s)] or list(SCENARIOS)
        asked = VerifyOptions(
            profile=resolved,
            seed=seed,
            trials=trials,
            lanes=want,
            write=not no_record,
            counterfactual=counterfactual,
            recorded=recorded,
            only=[s.id for s in chosen] if scenarios else [],
            pg_dsn=pg_dsn,
            redis_url=redis_url,
            pg_version=pg_version,
            redis_version=redis_version,
        )
        if matrix:
            _verify_matrix(chosen, asked, as_json)
            return
        vr = verify_command(chosen, asked, SCENARIOS, _Stderr())
        _print_verify(vr, as_json, asked.write)
        cf_bad = vr.summary.cannot_fail or vr.summary.ungrounded or vr.summary.unrun
        if not vr.summary.ok or (counterfactual and cf_bad):
            raise typer.Exit(1)

    guarded(body)


class _Stderr:
    """verify's lines, servers and progress bar on stderr (lab.verify.command.Display)."""

    def __init__(self) -> None:
        self.log = err()

    def say(self, line: str) -> None:
        self.log.print(line, markup=False)

    def servers(self, servers: Servers) -> None:
        report.servers(self.log, servers.infos(), servers.notes)

    def progress(self, total: int) -> report.DelayedProgress:
        return report.DelayedProgress(self.log, total)


def _print_verify(vr: VerifyRun, as_json: bool, write: bool) -> None:
    """The verdicts as one JSON document, or as tables with the coverage line, where the
    records went and the summary."""
    from lab.output.verdicts import print_summary, print_verdicts
    from lab.verify.judge import kinds_line

    if as_json:
        sys.stdout.write(json.dumps(vr.to_json(), default=str) + "\n")
        return
    console = _tables()
    print_verdicts(console, vr.results)
    console.print(vr.coverage, markup=False)
    if vr.run_id and write:
        console.print(f"[dim]records: {results_root() / vr.run_id}/[/dim]")
    print_summary(console, vr.summary, vr.wall_s, lanes=vr.lanes)
    if vr.summary.kinds:  # verify --counterfactual: what each claim's counterfactual was, last
        console.print(kinds_line(vr.summary.kinds), markup=False)


def _verify_matrix(chosen: list[Scenario], asked: VerifyOptions, as_json: bool) -> None:
    """verify --matrix: claims x server versions (lab/verify/matrix.py); exit 1 if a claim does
    not hold on some version, as verify does."""
    import time

    from lab.core.results import new_run_id
    from lab.output.matrix import print_matrix
    from lab.verify import summarize
    from lab.verify.matrix import columns, run_matrix

    given = (asked.recorded, asked.pg_dsn, asked.redis_url, asked.pg_version, asked.redis_version)
    if any(given):
        raise LabError(
            "verify --matrix starts every server version itself: it takes no "
            "--recorded, --pg-dsn, --redis-url, --pg-version or --redis-version"
        )
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
            asked.profile,
            cols,
            run_id=run_id,
            seed=asked.seed,
            trials=asked.trials,
            write=asked.write,
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
        if asked.write:
            console.print(f"[dim]records: {results_root() / run_id}/[/dim]")
        console.print(f"matrix: {len(cols)} server builds in {wall:.1f} s", markup=False)
    if not all(summarize(r, asked.profile.name).ok for r in m.results.values()):
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
