"""The `locklab` command: plain sync Typer commands that call asyncio.run()."""

from __future__ import annotations

import asyncio
import difflib
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, Any, TypeVar

import asyncpg
import typer
from rich.console import Console

from lab import report, timeline
from lab.errors import LabError, ScenarioFailure
from lab.results import results_root
from lab.runner import RunPlan, run_plan
from lab.scenario import Scenario
from lab.servers import Servers, open_servers, servers_down, servers_up, state_path
from lab.servers.faults import ServerFault
from lab.workload import Knobs, parse_arrival, parse_connect

app = typer.Typer(
    help="Reproduce concurrency bugs and their fixes against real PostgreSQL and Redis.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
servers_app = typer.Typer(
    help="Keep embedded servers running between commands.", no_args_is_help=True
)
app.add_typer(servers_app, name="servers")

T = TypeVar("T")


def out() -> Console:
    return Console(highlight=False)


def err() -> Console:
    return Console(stderr=True, highlight=False)


def guarded(body: Callable[[], T]) -> T:
    """Bad input and failed scenarios end as one line and a non-zero exit, no traceback."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # see lab/__init__.py
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with _sigterm_as_interrupt():
            _sweep_orphans()
            return body()
    except LabError as exc:
        _fail(f"locklab: {exc}")
        raise typer.Exit(2) from None
    except ServerFault as exc:  # a server or a system limit, named; not the scenario's
        _fail(f"locklab: {exc}")
        raise typer.Exit(3) from None
    except ScenarioFailure as exc:
        _fail(f"locklab: scenario failed: {exc}")
        raise typer.Exit(3) from None
    except (OSError, subprocess.SubprocessError, asyncpg.PostgresError, ValueError) as exc:
        # The environment refused something (a file, a binary, a privilege on the server):
        # the user's to fix, so one line like any other bad input.
        _fail(f"locklab: {type(exc).__name__}: {exc}")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        _fail(
            "locklab: interrupted; servers the lab started are stopped, "
            "no half-written record (variants that had finished keep theirs)"
        )
        raise typer.Exit(130) from None


def _sweep_orphans() -> None:
    """Servers left by an earlier lab process that died unable to stop them: stopped now,
    in one line (never fails the command)."""
    from lab.servers.lifecycle import sweep_orphans, warn

    try:
        line = sweep_orphans()
    except Exception as exc:
        line = f"could not look for servers of earlier runs: {exc}"
    if line:
        warn(line)


def _fail(line: str) -> None:
    """One line on stderr, never wrapped or styled."""
    sys.stderr.write(" ".join(line.split()) + "\n")
    sys.stderr.flush()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def find_scenario(name: str) -> Scenario:
    from scenarios import by_id

    catalogue = by_id()
    if name in catalogue:
        return catalogue[name]
    close = difflib.get_close_matches(name, catalogue, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise LabError(f"unknown scenario {name!r}{hint} (`locklab list` shows them all)")


def parse_params(
    scenario: Scenario, items: list[str], base: dict[str, Any] | None = None
) -> dict[str, Any]:
    params = dict(scenario.params if base is None else base)
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in params:
            known = ", ".join(params) or "none"
            raise LabError(f"--param {item!r}: {scenario.id} takes key=value with key in: {known}")
        default = params[key]
        try:
            if isinstance(default, bool):
                if raw.lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise ValueError(raw)
                params[key] = raw.lower() in ("true", "1", "yes", "on")
            elif isinstance(default, (int, float)):
                params[key] = type(default)(raw)
            else:
                params[key] = raw
        except ValueError:
            raise LabError(f"--param {key}={raw!r}: expected a {type(default).__name__}") from None
    return params


def variants_of(scenario: Scenario, variant: str) -> list[str]:
    if variant == "all":
        return list(scenario.variants)
    chosen = list(dict.fromkeys(v.strip() for v in variant.split(",") if v.strip()))
    if not chosen:
        raise LabError(f"--variant {variant!r}: name at least one variant, or all")
    for v in chosen:
        if v not in scenario.variants:
            raise LabError(
                f"{scenario.id} has no variant {v!r}; choose from: all, {', '.join(scenario.variants)}"
            )
    return chosen


def make_knobs(
    scenario: Scenario,
    n: int | None,
    arrival: str | None,
    connect: str | None,
    deadlock_timeout: int | None,
    seed: int,
    actor_timeout: float | None,
    run_timeout: float | None,
    base: Knobs | None = None,
) -> Knobs:
    d = base or scenario.defaults
    knobs = Knobs(
        n=d.n if n is None else n,
        arrival=arrival or d.arrival,
        connect=connect or d.connect,
        deadlock_timeout_ms=d.deadlock_timeout_ms if deadlock_timeout is None else deadlock_timeout,
        seed=seed,
        actor_timeout_s=d.actor_timeout_s if actor_timeout is None else actor_timeout,
        run_timeout_s=d.run_timeout_s if run_timeout is None else run_timeout,
    )
    if knobs.n < 1:
        raise LabError(f"-n {knobs.n}: a run needs at least one actor")
    if knobs.deadlock_timeout_ms < 1:
        raise LabError(f"--deadlock-timeout {knobs.deadlock_timeout_ms}: must be at least 1 ms")
    if not all(0 < t < math.inf for t in (knobs.actor_timeout_s, knobs.run_timeout_s)):
        raise LabError("timeouts must be positive numbers of seconds")
    parse_arrival(knobs.arrival)
    parse_connect(knobs.connect)
    return knobs


def plan_for(
    scenario: Scenario,
    variants: Sequence[str],
    profile: str,
    case: str | None,
    param: list[str] | None,
    write: bool,
    *,
    n: int | None,
    arrival: str | None,
    connect: str | None,
    deadlock_timeout: int | None,
    seed: int,
    actor_timeout: float | None,
    run_timeout: float | None,
) -> RunPlan:
    """The plan of `run` and `compare`: a profile's settings (and a case's), then the
    options the user gave (None where not given)."""
    from lab.profiles import profile_settings
    from lab.results import new_run_id

    base, base_params = profile_settings(scenario, profile, seed, case or "")
    knobs = make_knobs(
        scenario, n, arrival, connect, deadlock_timeout, seed, actor_timeout, run_timeout, base
    )
    params = parse_params(scenario, param or [], base_params)
    if scenario.validate is not None:  # before any server starts
        scenario.validate(knobs.n, params)
    return RunPlan(scenario, variants, knobs, params, new_run_id(), write=write, case=case or "")


def servers_for(
    scenarios: Sequence[Scenario], pg_dsn: str | None, redis_url: str | None, connect: str = ""
) -> Servers:
    """Every server the given scenarios (and a --connect mode) need, resolved once."""
    return open_servers(
        pg_dsn,
        redis_url,
        need_pg=any("pg" in s.uses for s in scenarios),
        need_redis=any("redis" in s.uses for s in scenarios),
        need_pgbouncer=connect.startswith("pgbouncer-")
        or any("pgbouncer" in s.uses for s in scenarios),
    )


PgDsn = Annotated[
    str | None,
    typer.Option("--pg-dsn", help="Use this PostgreSQL (superuser DSN); env LOCKLAB_PG_DSN."),
]
RedisUrl = Annotated[
    str | None, typer.Option("--redis-url", help="Use this Redis; env LOCKLAB_REDIS_URL.")
]
# The options `run` and `compare` share: one declaration, one help text.
ScenarioId = Annotated[str, typer.Argument(help="Scenario id (see `locklab list`).")]
Actors = Annotated[
    int | None,
    typer.Option("-n", help="Actors (default: the published size; --quick: the quick one)."),
]
Arrival = Annotated[str | None, typer.Option(help="burst | stagger:<ms>[~<ms>] | poisson:<per_s>.")]
Connect = Annotated[
    str | None,
    typer.Option(help="per-actor | pool:<size> | pgbouncer-transaction | pgbouncer-session."),
]
DeadlockTimeout = Annotated[
    int | None,
    typer.Option("--deadlock-timeout", help="PostgreSQL deadlock_timeout in ms (published: 1000)."),
]
Seed = Annotated[int, typer.Option(help="Seed for every random choice.")]
Case = Annotated[
    str | None,
    typer.Option(
        "--case", help="Start from one of the scenario's named settings (`locklab show`)."
    ),
]
ActorTimeout = Annotated[
    float | None, typer.Option(help="Hard limit per actor, seconds (then: timeout).")
]
RunTimeout = Annotated[float | None, typer.Option(help="Hard limit per variant run, seconds.")]
Params = Annotated[
    list[str] | None,
    typer.Option("--param", "-p", help="Scenario knob key=value (see `locklab show`)."),
]
AsJson = Annotated[
    bool, typer.Option("--json", help="Print one JSON record per variant on stdout, nothing else.")
]
NoRecord = Annotated[bool, typer.Option("--no-record", help="Do not write records under results/.")]


@app.command("list")
def list_cmd() -> None:
    """List the scenarios, their variants and sources."""
    from rich.table import Table

    from scenarios import SCENARIOS

    table = Table(title="scenarios")
    for col in ("id", "variants", "uses", "source", "what"):
        table.add_column(col, overflow="fold")
    for s in SCENARIOS:
        table.add_row(
            s.id, ", ".join(s.variants), ", ".join(sorted(s.uses)), ", ".join(s.sources), s.title
        )
    out().print(table)


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
    actor_timeout: ActorTimeout = None,
    run_timeout: RunTimeout = None,
    param: Params = None,
    pg_dsn: PgDsn = None,
    redis_url: RedisUrl = None,
    as_json: AsJson = False,
    no_record: NoRecord = False,
) -> None:
    """Run a scenario's variants with the same knobs and print them beside the published numbers."""

    def body() -> None:
        sc = find_scenario(scenario)
        plan = plan_for(
            sc, variants_of(sc, variant), "published", case, param, not no_record,
            n=n, arrival=arrival, connect=connect, deadlock_timeout=deadlock_timeout, seed=seed,
            actor_timeout=actor_timeout, run_timeout=run_timeout,
        )  # fmt: skip
        chosen = list(plan.variants)
        console = out()
        log = err()
        # In a terminal the result lines go above the progress bar (through the console
        # that draws it), or the bar's redraws would erase them; piped, they go to stdout.
        lines = log if console.is_terminal and log.is_terminal else console

        with servers_for([sc], pg_dsn, redis_url, plan.knobs.connect) as srv:
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
def show(scenario: Annotated[str, typer.Argument(help="Scenario id.")]) -> None:
    """Print a scenario's spec: docstring, variants, knobs and claims."""

    def body() -> None:
        sc = find_scenario(scenario)
        console = out()
        # the docstring is laid out already: wrapping it at 80 columns scrambles it
        console.print(sc.doc.strip(), markup=False, soft_wrap=True)
        console.print(f"\nvariants: {', '.join(sc.variants)}")
        d = sc.defaults
        console.print(
            f"defaults: -n {d.n} --arrival {d.arrival} --connect {d.connect} "
            f"--deadlock-timeout {d.deadlock_timeout_ms}"
        )
        for k, v in sc.params.items():
            console.print(f"  -p {k}={v}  {sc.param_help.get(k, '')}", markup=False)
        for name, overrides in sc.cases.items():
            settings = " ".join(f"{k}={v}" for k, v in overrides.items())
            console.print(
                f"case {name}: {settings}  (locklab run {sc.id} --case {name})", markup=False
            )
        for c in sc.claims:
            console.print(f"claim {c.id} [{', '.join(c.variants)}] {c.text}", markup=False)

    guarded(body)


@app.command()
def doctor() -> None:
    """Which servers and binaries would be used, their versions, and whether Docker answers."""

    def body() -> None:
        from lab.servers import docker
        from lab.servers.embedded import find_redis_server, pg_bindir_candidates, usable_bindir

        console = out()
        console.print(f"python {sys.version.split()[0]}, euid {os.geteuid()}")
        for env in ("LOCKLAB_PG_DSN", "LOCKLAB_REDIS_URL", "LOCKLAB_SERVERS", "LOCKLAB_PG_BINDIR"):
            if os.environ.get(env):
                console.print(f"{env} is set", markup=False)
        reason = docker.docker_unavailable()
        console.print(f"docker: {'engine answers' if reason is None else reason}")
        for bindir, source in pg_bindir_candidates():
            version = usable_bindir(bindir)
            state = f"PostgreSQL {version}" if version else "not usable"
            console.print(f"postgresql candidate: {bindir} ({source}): {state}", markup=False)
        try:
            binary, source = find_redis_server()
            console.print(f"redis-server: {binary} ({source})", markup=False)
        except LabError as exc:
            console.print(f"redis-server: {exc}", markup=False)
        console.print(
            f"kept servers state: {state_path()} ({'present' if state_path().exists() else 'none'})",
            markup=False,
        )

    guarded(body)


@servers_app.command("up")
def servers_up_cmd() -> None:
    """Start embedded PostgreSQL and Redis and keep them for later commands."""
    guarded(lambda: report.servers(out(), servers_up().infos()))


@servers_app.command("down")
def servers_down_cmd() -> None:
    """Stop the servers `servers up` started (by their recorded PIDs)."""

    def body() -> None:
        stopped = servers_down()
        out().print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))

    guarded(body)


@servers_app.command("status")
def servers_status_cmd() -> None:
    """Show the kept servers, if any."""

    def body() -> None:
        from lab.servers import kept_servers

        kept = kept_servers()
        if kept is None:
            out().print("no kept servers (start them with `locklab servers up`)")
        else:
            report.servers(out(), kept.infos())

    guarded(body)


@app.command()
def bench(
    n: Annotated[int, typer.Option("-n", help="Clients / actors.")] = 200,
    rounds: Annotated[int, typer.Option(help="Alternating lab/pgbench rounds (medians).")] = 3,
    pg_dsn: PgDsn = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON only.")] = False,
    no_record: NoRecord = False,
) -> None:
    """Fixed checkout through the lab vs the same workload through pgbench: the ratio of wall times."""

    def body() -> None:
        from lab.bench import TARGET_RATIO, run_bench
        from lab.results import git_commit, new_run_id, write_json

        if n < 1 or rounds < 1:
            raise LabError("bench: -n and --rounds must be at least 1")
        run_id = new_run_id()
        with open_servers(pg_dsn, None, need_redis=False) as srv:
            report.servers(err(), srv.infos(), srv.notes)
            with err().status(f"bench: {rounds} rounds of {n} clients ..."):
                res = asyncio.run(run_bench(srv, n, rounds, run_id.replace("-", "")[-8:]))
            infos = {i.product: i.to_json() for i in srv.infos()}
        if not no_record:  # beside run records, in a subfolder: not a scenario run
            path = results_root() / run_id / "bench" / "result.json"
            write_json(path, {**res.to_json(), "servers": infos, "git_commit": git_commit()})
            err().print(f"[dim]record: {path}[/dim]")
        if as_json:
            sys.stdout.write(json.dumps(res.to_json()) + "\n")
            return
        console = out()
        console.print(f"lab      {', '.join(f'{x:.0f}' for x in res.lab_ms)} ms", markup=False)
        console.print(
            f"pgbench  {', '.join(f'{x:.0f}' for x in res.pgbench_ms)} ms  ({res.pgbench})",
            markup=False,
        )
        verdict = "within" if res.ratio <= TARGET_RATIO else "ABOVE"
        console.print(
            f"ratio lab/pgbench (medians) = {res.ratio:.2f}  ({verdict} the {TARGET_RATIO}x target)"
        )

    guarded(body)


# --- compare, verify, results, diff, report (issue 4) ------------------------------------


def _tables() -> Console:
    """stdout for tables: piped into a file or a program it gets 160 columns, not 80."""
    console = out()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(highlight=False, width=160)
    return console


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
    pg_dsn: PgDsn = None,
    redis_url: RedisUrl = None,
    as_json: AsJson = False,
    no_record: NoRecord = False,
) -> None:
    """Run every variant with the same knobs: one table, beside the published numbers."""

    def body() -> None:
        sc = find_scenario(scenario)
        plan = plan_for(
            sc, list(sc.variants), "quick" if quick else "published", case, param, not no_record,
            n=n, arrival=arrival, connect=connect, deadlock_timeout=deadlock_timeout, seed=seed,
            actor_timeout=actor_timeout, run_timeout=run_timeout,
        )  # fmt: skip
        knobs, variants = plan.knobs, list(plan.variants)
        log = err()
        with servers_for([sc], pg_dsn, redis_url, knobs.connect) as srv:
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


@app.command()
def verify(
    scenarios: Annotated[
        list[str] | None, typer.Argument(help="Scenario ids (default: the whole catalogue).")
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
) -> None:
    """Re-run scenarios and judge every documented claim; exit 1 if one does not hold."""

    def body() -> None:
        import time

        from lab.profiles import check_profile, profile_settings
        from lab.results import new_run_id
        from lab.verify import (
            coverage,
            judge_across,
            print_summary,
            print_verdicts,
            save_verdicts,
            steps,
            summarize,
            verify_plan,
            verify_recorded,
            verify_scenario,
        )
        from scenarios import SCENARIOS, by_id

        check_profile(profile)
        if trials is not None and trials < 1:
            raise LabError(f"--trials {trials}: must be at least 1")
        chosen = [find_scenario(s) for s in scenarios or []] or list(SCENARIOS)
        started = time.perf_counter()
        log = err()
        run_id = ""
        if recorded is not None:
            only = [s.id for s in chosen] if scenarios else []
            results = verify_recorded(recorded, by_id(), profile, only, trials)
        else:
            run_id = new_run_id()
            total = sum(steps(s, profile, trials) for s in chosen)
            results = []
            modes = [profile_settings(s, profile)[0].connect for s in chosen]
            bouncer = next((m for m in modes if m.startswith("pgbouncer-")), "")
            with servers_for(chosen, pg_dsn, redis_url, bouncer) as srv:
                report.servers(log, srv.infos(), srv.notes)
                with report.DelayedProgress(log, total) as bar:
                    for sc, case in verify_plan(chosen, profile, trials):
                        name = f"{sc.id} [{case}]" if case else sc.id
                        bar.describe(f"verify {profile}: {name}")
                        res = asyncio.run(
                            verify_scenario(
                                sc, profile, srv, run_id=run_id, seed=seed, trials=trials,
                                write=not no_record, on_step=bar.advance, case=case,
                            )
                        )  # fmt: skip
                        if res.error:
                            log.print(f"locklab: {name} failed: {res.error}", markup=False)
                        results.append(res)
            for sc in chosen:  # claims that compare a scenario's cases
                if (across := judge_across(sc, profile, results)) is not None:
                    results.append(across)
        summary = summarize(results, results[0].profile if results else profile)
        wall = time.perf_counter() - started
        covered = coverage(results, SCENARIOS)
        if run_id and not no_record:
            save_verdicts(run_id, results, summary, covered, wall)
        if as_json:
            doc = {
                "run_id": run_id or recorded,
                "summary": summary.to_json(),
                "wall_s": round(wall, 1),
                "coverage": covered,
                "scenarios": [r.to_json() for r in results],
            }
            sys.stdout.write(json.dumps(doc, default=str) + "\n")
        else:
            console = _tables()
            print_verdicts(console, results)
            console.print(covered, markup=False)
            if run_id and not no_record:
                console.print(f"[dim]records: {results_root() / run_id}/[/dim]")
            print_summary(console, summary, wall)
        if not summary.ok:
            raise typer.Exit(1)

    guarded(body)


@app.command("results")
def results_cmd(
    limit: Annotated[int, typer.Option(help="Show at most this many runs.")] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="The listing as JSON.")] = False,
) -> None:
    """List recorded runs under results/ (newest first)."""

    def body() -> None:
        from lab.diff import list_summaries, print_runs

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
        from lab.diff import diff_runs, print_diff
        from lab.results import load_run, run_folder

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
        from pathlib import Path

        from lab.html_report import write_report

        path = write_report(run, Path(output) if output else None)
        out().print(f"wrote {path}", markup=False)

    guarded(body)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
