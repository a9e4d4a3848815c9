"""Pinned sessions and isolation specs: trace, explore, spec-suite."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from lab.cli.base import _tables, app, err, guarded, out
from lab.cli.options import (
    DeadlockTimeout,
    Isolation,
    NoRecord,
    Params,
    PgDsn,
    PgVersion,
    SvgFile,
    find_scenario,
    parse_params,
    servers_for,
    variants_of,
)
from lab.cli.pinned_options import (
    ActorCommands,
    AllOrders,
    Exhaustive,
    ExploreDeadlockTimeout,
    ExploreJson,
    FirstOnly,
    InvariantCmd,
    InvariantFile,
    MaxOrders,
    OptionalScenario,
    Pauses,
    RedisSetupFile,
    Reduce,
    SampleSeed,
    SetupFile,
    SpecOut,
    store_options,
)
from lab.core.results import results_root
from lab.core.scenario import Scenario, check_params
from lab.errors import LabError
from lab.output import console as report
from lab.servers import open_servers


def _pinned_params(sc: Scenario, given: list[str] | None) -> dict[str, Any]:
    """The -p given to trace or explore, the keys named only, each checked as `run` checks
    it, over the pinned story's own parameters; the isolation level is --isolation's."""
    if not given:
        return {}
    from lab.pinned import pinned_of

    pinned = pinned_of(sc)
    keys = [item.partition("=")[0] for item in given]
    if "isolation" in keys:
        raise LabError("-p isolation: give the levels with --isolation")
    full = parse_params(sc, given, {**sc.params, **pinned.params})
    check_params(sc, len(pinned.sessions), full)
    return {key: full[key] for key in keys}


def _actor_mode(scenario: str | None, actors: list[str] | None, **only: bool) -> bool:
    """Whether the command runs actors; refuses a mix with a scenario's options."""
    if actors and only.pop("-p", False):
        raise LabError("-p: a scenario's parameter; an actor takes its own arguments")
    only.pop("-p", None)
    if not actors:
        if scenario is None:
            raise LabError("give a scenario (see `locklab list`), a FILE.spec, or --actor commands")
        extra = [name for name, on in only.items() if on]
        if extra:
            raise LabError(f"{', '.join(extra)}: only with --actor")
        return False
    if scenario is not None:
        raise LabError(f"--actor runs programs, not a scenario: drop {scenario!r}")
    return True


@app.command("trace")
def trace_cmd(
    scenario: OptionalScenario = None,
    variant: Annotated[
        str, typer.Option("--variant", "-v", help="A variant, a comma list, or all.")
    ] = "all",
    schedule: Annotated[
        str | None,
        typer.Option(help="A canonical schedule's name, or steps: 's1 read, s2 read, ...'."),
    ] = None,
    isolation: Isolation = None,
    deadlock_timeout: DeadlockTimeout = None,
    param: Params = None,
    pg_dsn: PgDsn = None,
    svg: SvgFile = None,
    no_record: NoRecord = False,
    pg_version: PgVersion = None,
    expected: Annotated[
        Path | None,
        typer.Option(
            help="FILE.spec only: diff stdout against this expected output (and "
            "its alternates NAME_1.out, ...); exit 1 on a difference."
        ),
    ] = None,
    actor: ActorCommands = None,
    setup: SetupFile = None,
    invariant: InvariantFile = None,
    redis_setup: RedisSetupFile = None,
    invariant_cmd: InvariantCmd = None,
    pause: Pauses = None,
) -> None:
    """Print the transcript of a schedule: each step, its SQL and result, who waited. A
    PostgreSQL isolation spec (FILE.spec) prints exactly what its isolation tester prints.
    With --actor: one order of unchanged programs' statements (--schedule 1,2,1,2)."""
    only = {"--setup": setup is not None, "--invariant": invariant is not None, "-p": bool(param)}
    only |= store_options(redis_setup, invariant_cmd, pause)
    if guarded(lambda: _actor_mode(scenario, actor, **only)):
        from lab.cli.actors import Stores, trace_actors

        stores = Stores(redis_setup, invariant_cmd, pause)
        guarded(
            lambda: trace_actors(
                actor or [], setup, invariant, schedule, pg_dsn, deadlock_timeout, stores
            )
        )
        return
    assert scenario is not None
    if scenario.endswith(".spec"):
        not_for_spec = {
            "--variant": variant != "all",
            "--schedule": schedule is not None,
            "--isolation": isolation is not None,
            "--svg": svg is not None,
            "--deadlock-timeout": deadlock_timeout is not None,
            "-p": bool(param),
        }
        guarded(lambda: _trace_spec(Path(scenario), pg_dsn, pg_version, expected, not_for_spec))
        return
    guarded(
        lambda: _trace_scenario(
            scenario,
            variant,
            schedule,
            isolation,
            deadlock_timeout,
            pg_dsn,
            svg,
            no_record,
            pg_version,
            expected,
            param,
        )
    )


def _trace_scenario(
    scenario: str,
    variant: str,
    schedule: str | None,
    isolation: str | None,
    deadlock_timeout: int | None,
    pg_dsn: str | None,
    svg: str | None,
    no_record: bool,
    pg_version: str | None,
    expected: Path | None,
    param: list[str] | None,
) -> None:
    """`locklab trace SCENARIO`: each chosen schedule's transcript, then its record."""
    from lab.core.results import new_run_id
    from lab.output.pictures import draw_svg, svg_target
    from lab.pinned import isolation_levels, schedules_for, trace, trace_record, write_trace

    if expected is not None:
        raise LabError("--expected diffs an isolation spec's output: give a FILE.spec")
    sc = find_scenario(scenario)
    params = _pinned_params(sc, param)
    runs = schedules_for(sc, variants_of(sc, variant), schedule)
    levels = isolation_levels(sc, isolation)
    dl = sc.defaults.deadlock_timeout_ms if deadlock_timeout is None else deadlock_timeout
    if dl < 1:
        raise LabError(f"--deadlock-timeout {dl}: must be at least 1 ms")
    picture = None if svg is None else svg_target(svg)
    console, log, run_id = out(), err(), new_run_id()
    with servers_for([sc], pg_dsn, None, pg_version=pg_version) as srv:
        report.servers(log, srv.infos(), srv.notes)
        shown: list[str] = []

        def show(res: Any) -> None:  # a blank line between two transcripts
            text = ("\n" if shown else "") + res.transcript
            console.print(text, markup=False, end="", soft_wrap=True)
            shown.append(res.name)

        done = asyncio.run(
            trace(
                sc, srv, runs, levels, run_id=run_id, deadlock_ms=dl, on_result=show, params=params
            )
        )
        record = trace_record(sc, srv, done, run_id=run_id, deadlock_ms=dl, params=params)
    if picture is not None:
        log.print(draw_svg(record, picture), markup=False)
    if not no_record:
        log.print(f"[dim]record: {write_trace(record)}[/dim]")


def _refuse(why: str) -> None:
    raise LabError(why)


def _not_for_spec(given: dict[str, bool], path: Path) -> None:
    """Options a spec decides itself (its sessions, steps, permutations) are refused."""
    named = [name for name, on in given.items() if on]
    if named:
        raise LabError(f"{', '.join(named)}: not for an isolation spec ({path})")


def _trace_spec(
    path: Path,
    pg_dsn: str | None,
    pg_version: str | None,
    expected: Path | None,
    given: dict[str, bool],
) -> None:
    """`locklab trace FILE.spec`: the spec run on the lab's PostgreSQL, a database of its
    own; stdout is the isolation tester's output, everything else stderr."""
    _not_for_spec(given, path)
    from lab.servers.versions import open_for
    from lab.spec import read_spec
    from lab.spec.expected import compare_expected
    from lab.spec.run import run_spec_report

    spec = read_spec(path)  # a bad spec: one line, exit 2, before any server starts
    wanted = [] if expected is None else _expected_files(expected)
    with open_for(pg_dsn, None, pg_version, None, need_pg=True, need_redis=False) as srv:
        report.servers(err(), srv.infos(), srv.notes)
        assert srv.pg is not None
        text, code, gave_up = run_spec_report(spec, srv.pg.dsn)
    sys.stdout.write(text)
    sys.stdout.flush()
    if wanted:
        same, diff = compare_expected(text, wanted)
        if not same:
            sys.stderr.write(diff)
            err().print(f"locklab: {path} differs from {wanted[0]}", markup=False)
            code = code or 1
        else:
            err().print(f"identical to {same}", markup=False)
    if gave_up is not None:  # the tester's text is out; the step that never returned, named
        raise LabError(f"{path}:{gave_up[0]}: {gave_up[1]}")
    if code:
        raise typer.Exit(code)


def _expected_files(expected: Path) -> list[Path]:
    """The expected output and its alternates (NAME_1.out, NAME_2.out, ...) beside it."""
    if not expected.is_file():
        raise LabError(f"--expected {expected}: no such file")
    alternates = sorted(expected.parent.glob(f"{expected.stem}_[0-9]*{expected.suffix}"))
    return [expected, *alternates]


@app.command("spec-suite")
def spec_suite_cmd(
    folder: Annotated[
        Path,
        typer.Argument(help="A folder laid out like src/test/isolation: specs/, expected/."),
    ],
    lanes: Annotated[int, typer.Option(help="Specs run side by side, a database each.")] = 4,
    only: Annotated[
        str | None, typer.Option(help="A comma list of spec names (default: the schedule's).")
    ] = None,
    pg_dsn: PgDsn = None,
    pg_version: PgVersion = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the record only.")] = False,
    no_record: NoRecord = False,
) -> None:
    """Run every isolation spec of a folder, compare each with its expected output: a table
    of identical / differs / skipped; outputs and diffs in the results folder. Exit 1 if
    one differs."""

    def body() -> None:
        from lab.core.results import new_run_id
        from lab.servers.versions import open_for
        from lab.spec.suite import run_suite, suite_names, table_lines, write_results

        names = suite_names(folder)
        if only is not None:
            asked = [n.strip() for n in only.split(",") if n.strip()]
            unknown = [n for n in asked if not (folder / "specs" / f"{n}.spec").is_file()]
            if unknown or not asked:
                raise LabError(f"--only {only!r}: no spec {', '.join(unknown) or 'named'}")
            names = asked
        log = err()
        with open_for(pg_dsn, None, pg_version, None, need_pg=True, need_redis=False) as srv:
            report.servers(log, srv.infos(), srv.notes)
            assert srv.pg is not None

            def done(o: Any) -> None:
                log.print(f"[dim]{o.name:<40} {o.status} {o.why}[/dim]", markup=True)

            res = run_suite(folder, srv.pg.dsn, lanes=lanes, names=names, on_done=done)
        if not no_record:
            path = write_results(res, results_root() / new_run_id() / "spec-suite")
            log.print(f"[dim]record: {path}[/dim]")
        if as_json:
            sys.stdout.write(json.dumps(res.to_json()) + "\n")
        else:
            for line in table_lines(res):
                out().print(line, markup=False, soft_wrap=True)
        if res.counts()["differs"]:
            raise typer.Exit(1)

    guarded(body)


@app.command("explore")
def explore_cmd(
    scenario: OptionalScenario = None,
    variant: Annotated[
        str, typer.Option("--variant", "-v", help="A variant, a comma list, or all.")
    ] = "all",
    isolation: Isolation = None,
    deadlock_timeout: ExploreDeadlockTimeout = None,
    param: Params = None,
    pg_dsn: PgDsn = None,
    as_json: ExploreJson = False,
    no_record: NoRecord = False,
    svg: SvgFile = None,
    actor: ActorCommands = None,
    setup: SetupFile = None,
    invariant: InvariantFile = None,
    max_orders: MaxOrders = None,
    first: FirstOnly = False,
    reduce: Reduce = False,
    all_orders: AllOrders = False,
    spec_out: SpecOut = None,
    exhaustive: Exhaustive = False,
    seed: SampleSeed = None,
    redis_setup: RedisSetupFile = None,
    invariant_cmd: InvariantCmd = None,
    pause: Pauses = None,
) -> None:
    """Run every interleaving of the sessions' steps; per variant and isolation level, how
    many kept the invariants and how the others broke them. An isolation spec (FILE.spec):
    every interleaving of its steps, per isolation level, how each ended. With --actor:
    every order of unchanged programs' statements, each on a fresh copy of --setup."""
    only = {"--setup": setup is not None, "--invariant": invariant is not None}
    only |= {"--max": max_orders is not None, "--first": first, "--spec": spec_out is not None}
    only |= {"--all-orders": all_orders, "-p": bool(param)}
    only |= {"--exhaustive": exhaustive, "--seed": seed is not None}
    only |= store_options(redis_setup, invariant_cmd, pause)
    if guarded(lambda: _actor_mode(scenario, actor, **only)):
        from lab.cli.actors import Asked, Stores, explore_actors

        if reduce:
            guarded(lambda: _refuse("--reduce: actors' orders are reduced already (--all-orders)"))
        asked = Asked(max_orders, first, as_json, spec_out, all_orders, exhaustive, seed or 1)
        stores = Stores(redis_setup, invariant_cmd, pause)
        guarded(
            lambda: explore_actors(
                actor or [], setup, invariant, pg_dsn, deadlock_timeout, asked, stores
            )
        )
        return
    assert scenario is not None
    if scenario.endswith(".spec"):
        not_for_spec = {"--variant": variant != "all", "--svg": svg is not None, "-p": bool(param)}
        path = Path(scenario)
        guarded(
            lambda: _explore_spec(
                path, isolation, deadlock_timeout, pg_dsn, as_json, no_record, not_for_spec
            )
        )
        return
    guarded(
        lambda: _explore_scenario(
            scenario,
            variant,
            isolation,
            deadlock_timeout,
            pg_dsn,
            as_json,
            no_record,
            svg,
            reduce,
            param,
        )
    )


def _explore_scenario(
    scenario: str,
    variant: str,
    isolation: str | None,
    deadlock_timeout: int | None,
    pg_dsn: str | None,
    as_json: bool,
    no_record: bool,
    svg: str | None,
    reduce: bool,
    param: list[str] | None,
) -> None:
    """`locklab explore SCENARIO`: every interleaving per variant and level (with
    `reduce`, one of each set of equivalent ones), then a table."""
    from lab.core.results import new_run_id
    from lab.output.explore import print_explore
    from lab.output.pictures import draw_svg, svg_target
    from lab.pinned import explore, isolation_levels, pinned_of, write_explore

    sc = find_scenario(scenario)
    params = _pinned_params(sc, param)
    pinned = pinned_of(sc)
    chosen = variants_of(sc, variant)
    levels = isolation_levels(sc, isolation or ",".join(pinned.isolation))
    dl = 100 if deadlock_timeout is None else deadlock_timeout
    if dl < 1:
        raise LabError(f"--deadlock-timeout {dl}: must be at least 1 ms")
    picture = None if svg is None else svg_target(svg)
    run_id = new_run_id()
    log = err()
    with open_servers(pg_dsn, None, need_redis="redis" in sc.uses) as srv:
        report.servers(log, srv.infos(), srv.notes)
        with report.DelayedProgress(log, len(chosen) * len(levels)) as bar:
            bar.describe(f"explore {sc.id}")
            plan = {v: levels for v in chosen}
            record = asyncio.run(
                explore(
                    sc,
                    srv,
                    plan,
                    run_id=run_id,
                    deadlock_ms=dl,
                    on_progress=bar.advance,
                    reduce=reduce,
                    params=params,
                )
            )
    drew = None if picture is None else draw_svg(record, picture)
    path = None if no_record else write_explore(record)
    if as_json:
        sys.stdout.write(json.dumps(record, default=str) + "\n")
        return
    console = _tables()
    print_explore(console, record)
    if drew is not None:
        console.print(drew, markup=False)
    if path is not None:
        console.print(f"[dim]record: {path}[/dim]")


def _explore_spec(
    path: Path,
    isolation: str | None,
    deadlock_ms: int | None,
    pg_dsn: str | None,
    as_json: bool,
    no_record: bool,
    given: dict[str, bool],
) -> None:
    """`locklab explore FILE.spec`: every permutation of the spec's steps, per level."""
    from lab.core.results import new_run_id, write_json
    from lab.servers.versions import open_for
    from lab.spec.explore import explore_spec, levels_for, table_lines
    from lab.spec.parse import read_spec

    _not_for_spec(given, path)
    read_spec(path)  # a bad spec: one line, exit 2, before any server starts
    levels_for(path.read_text(errors="replace"), isolation)  # a bad --isolation too
    if deadlock_ms is not None and deadlock_ms < 1:
        raise LabError(f"--deadlock-timeout {deadlock_ms}: must be at least 1 ms")
    with open_for(pg_dsn, None, None, None, need_pg=True, need_redis=False) as srv:
        report.servers(err(), srv.infos(), srv.notes)
        assert srv.pg is not None
        with err().status(f"explore {path.name} ..."):
            results = explore_spec(path, srv.pg.dsn, isolation, deadlock_ms)
    record = {
        "kind": "explore-spec",
        "spec": str(path),
        "deadlock_timeout_ms": deadlock_ms,
        "levels": [r.to_json() for r in results],
        "servers": {i.product: i.to_json() for i in srv.infos()},
    }
    if not no_record:
        target = results_root() / new_run_id() / "explore-spec" / f"{path.stem}.json"
        err().print(f"[dim]record: {write_json(target, record)}[/dim]")
    if as_json:
        sys.stdout.write(json.dumps(record, default=str) + "\n")
        return
    for line in table_lines(path, results):
        out().print(line, markup=False, soft_wrap=True)
