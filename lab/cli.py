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
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, TypeVar

import asyncpg
import typer
from rich.console import Console

from lab import report, timeline
from lab.errors import LabError, ScenarioFailure
from lab.netdelay import SERVERS, parse_rtt
from lab.results import results_root
from lab.runner import RunPlan, run_plan
from lab.scenario import Scenario
from lab.servers import Servers, open_servers, servers_down, servers_up, state_path
from lab.servers.faults import ServerFault
from lab.workload import Knobs, parse_arrival, parse_connect, parse_redis_client

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
    """A catalogue id, or the path of a scenario file (lab/loader.py)."""
    from scenarios import IDS, get

    if name in IDS:
        return get(name)  # only its own module is imported
    from lab.loader import looks_like_path

    if looks_like_path(name):
        return find_scenarios(name, many=False)[0]
    close = difflib.get_close_matches(name, IDS, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise LabError(f"unknown scenario {name!r}{hint} (`locklab list` shows them all)")


def _in_catalogue(name: str) -> bool:
    from scenarios import IDS

    return name in IDS


def find_scenarios(name: str, many: bool = True) -> list[Scenario]:
    """What one argument names: a catalogue id, a scenario file, or (`many`) a folder of them."""
    from lab.loader import load_path, looks_like_path
    from scenarios import IDS

    if name in IDS or not looks_like_path(name):
        return [find_scenario(name)]
    found = load_path(name)
    if len(found) > 1 and not many:
        ids = ", ".join(s.id for s in found)
        raise LabError(f"{name}: a folder of {len(found)} scenarios ({ids}); name one file")
    return found


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
    rtt: str | None = None,
    procs: str | None = None,
    redis_client: str | None = None,
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
        rtt=(getattr(d, "rtt", "") if rtt is None else rtt).strip(),
        procs=parse_procs(procs) if procs is not None else getattr(d, "procs", 0),
        redis_client=parse_redis_client(redis_client or d.redis_client),
    )
    if knobs.n < 1:
        raise LabError(f"-n {knobs.n}: a run needs at least one actor")
    if knobs.deadlock_timeout_ms < 1:
        raise LabError(f"--deadlock-timeout {knobs.deadlock_timeout_ms}: must be at least 1 ms")
    if not all(0 < t < math.inf for t in (knobs.actor_timeout_s, knobs.run_timeout_s)):
        raise LabError("timeouts must be positive numbers of seconds")
    parse_arrival(knobs.arrival)
    parse_connect(knobs.connect)
    for server in parse_rtt(knobs.rtt):  # the actors' connections only: scripts have none
        if scenario.kind != "actors" or server not in scenario.uses:
            raise LabError(
                f"--rtt {knobs.rtt!r}: applies to actors' {SERVERS[server]} connections; "
                f"{scenario.id} has none"
            )
    return knobs


def parse_procs(spec: str) -> int:
    """`auto` (0: the scenario's choice) or a number of worker processes >= 1."""
    if spec == "auto":
        return 0
    if not spec.isdigit() or int(spec) < 1:
        raise LabError(f"--procs {spec!r}: expected auto or a number of processes >= 1")
    return int(spec)


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
    rtt: str | None = None,
    procs: str | None = None,
    redis_client: str | None = None,
) -> RunPlan:
    """The plan of `run` and `compare`: a profile's settings (and a case's), then the
    options the user gave (None where not given)."""
    from lab.profiles import profile_settings
    from lab.results import new_run_id

    base, base_params = profile_settings(scenario, profile, seed, case or "")
    knobs = make_knobs(
        scenario, n, arrival, connect, deadlock_timeout, seed, actor_timeout, run_timeout, base,
        rtt, procs, redis_client,
    )  # fmt: skip
    params = parse_params(scenario, param or [], base_params)
    if scenario.validate is not None:  # before any server starts
        scenario.validate(knobs.n, params)
    return RunPlan(scenario, variants, knobs, params, new_run_id(), write=write, case=case or "")


def servers_for(
    scenarios: Sequence[Scenario],
    pg_dsn: str | None,
    redis_url: str | None,
    connect: str = "",
    pg_version: str | None = None,
    redis_version: str | None = None,
) -> Servers:
    """Every server the given scenarios (and a --connect mode) need, resolved once (of the
    versions asked for: lab/servers/versions.py)."""
    from lab.servers.versions import open_for

    return open_for(
        pg_dsn,
        redis_url,
        pg_version,
        redis_version,
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
ScenarioId = Annotated[
    str, typer.Argument(help="Scenario id (see `locklab list`), or a scenario file's path.")
]
PgVersion = Annotated[
    str | None,
    typer.Option(
        "--pg-version", help="Start this PostgreSQL (15, 17.10, 18; `locklab doctor` lists them)."
    ),
]
RedisVersion = Annotated[
    str | None,
    typer.Option(
        "--redis-version", help="Start this Redis (8.2, 7.0, valkey; `locklab doctor` lists them)."
    ),
]
Actors = Annotated[
    int | None,
    typer.Option("-n", help="Actors (default: the published size; --quick: the quick one)."),
]
Arrival = Annotated[str | None, typer.Option(help="burst | stagger:<ms>[~<ms>] | poisson:<per_s>.")]
Connect = Annotated[
    str | None,
    typer.Option(
        help="per-actor | pool:<size> (a client per actor) | tx-pool:<size> (a client per "
        "transaction attempt, FIFO, node-postgres' db.tx) | pgbouncer-transaction | "
        "pgbouncer-session."
    ),
]
Rtt = Annotated[
    str | None,
    typer.Option(
        "--rtt",
        help="Network round-trip ms the actors' connections pay (a delay proxy per server, "
        "half each way; measured and recorded). <ms> or pg:<ms> (PostgreSQL; through "
        "PgBouncer, its hop to PostgreSQL), redis:<ms>, or both: pg:20,redis:5.",
    ),
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
Procs = Annotated[
    str | None,
    typer.Option("--procs", help="Worker processes for the actors: auto (default) or K."),
]
RedisClient = Annotated[
    str | None,
    typer.Option(
        "--redis-client",
        help="pipelined (one connection, commands written without waiting: node-redis's way) "
        "| pooled (redis-py, a connection per command in flight). Default: the scenario's.",
    ),
]


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


@app.command("claims")
def claims_cmd(
    markdown: Annotated[
        bool, typer.Option("--markdown", help="The catalogue as Markdown (docs/claims.md).")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file, not stdout.")
    ] = None,
) -> None:
    """Every document claim id, which scenarios reach it, and each scenario's claims."""

    def body() -> None:
        from rich.table import Table

        from lab.catalogue import CLAIM_IDS, DOCUMENTS, document_ids, reached, render_markdown
        from scenarios import SCENARIOS

        if markdown or output is not None:
            text = render_markdown(SCENARIOS)
            if output is None:
                sys.stdout.write(text)
            else:
                output.write_text(text, encoding="utf-8")
                out().print(f"wrote {output}", markup=False)
            return
        by_id = reached(SCENARIOS)
        table = Table(title="document claims")
        for col in ("id", "claim", "scenarios"):
            table.add_column(col, overflow="fold")
        for doc in DOCUMENTS:
            for i in document_ids(doc):
                table.add_row(i, CLAIM_IDS[i], ", ".join(by_id.get(i, [])) or "not reached")
        console = out()
        console.print(table)
        for doc in DOCUMENTS:
            ids = document_ids(doc)
            hit = sum(1 for i in ids if i in by_id)
            console.print(f"{doc}: {hit} of {len(ids)} ids carried by a claim", markup=False)

    guarded(body)


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
    from lab.loader import is_folder, scenario_files

    if is_folder(scenario) and not _in_catalogue(scenario):  # a folder: each file in turn
        for path in guarded(lambda: scenario_files(scenario)):
            run(**{**args, "scenario": str(path)})
        return

    def body() -> None:
        sc = find_scenario(scenario)
        plan = plan_for(
            sc, variants_of(sc, variant), "published", case, param, not no_record,
            n=n, arrival=arrival, connect=connect, deadlock_timeout=deadlock_timeout, seed=seed,
            actor_timeout=actor_timeout, run_timeout=run_timeout, rtt=rtt, procs=procs,
            redis_client=redis_client,
        )  # fmt: skip
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
def show(scenario: ScenarioId) -> None:
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
        for v, named in (sc.pinned.schedules if sc.pinned else {}).items():
            for name, steps in named.items():
                console.print(f"schedule {v} {name}: {', '.join(steps)}", markup=False)
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
        from lab.servers.versions import pg_available, redis_available

        for kind, found in (
            ("--pg-version", pg_available()),
            ("--redis-version", redis_available()),
        ):
            listed = ", ".join(f"{a.label} ({a.source})" for a in found) or "none"
            console.print(f"{kind}: {listed}", markup=False)

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
    what: Annotated[
        str,
        typer.Argument(
            help="checkout (against pgbench) | redis (against redis-benchmark) | isolation "
            "(a spec folder, --specs, against pg_isolation_regress)."
        ),
    ] = "checkout",
    n: Annotated[
        int | None,
        typer.Option(
            "-n", help="Clients / actors (checkout 200; redis: 500, 1000, 2000 and 5000)."
        ),
    ] = None,
    rounds: Annotated[int, typer.Option(help="Alternating lab/pgbench rounds (medians).")] = 3,
    scale: Annotated[
        bool, typer.Option("--scale", help="checkout at n = 50, 100, 200, 400, 1000: the curve.")
    ] = False,
    procs: Procs = None,
    redis_client: RedisClient = None,
    pg_dsn: PgDsn = None,
    redis_url: RedisUrl = None,
    specs: Annotated[
        Path | None,
        typer.Option(help="isolation: a folder laid out like src/test/isolation."),
    ] = None,
    lanes: Annotated[int, typer.Option(help="isolation: the lab's lanes.")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON only.")] = False,
    no_record: NoRecord = False,
) -> None:
    """The lab against a reference tool on the same server: pgbench (checkout),
    redis-benchmark (redis) or pg_isolation_regress (isolation); both sides, the ratio,
    and a record."""

    def body() -> None:
        from lab.results import git_commit, new_run_id, write_json

        if what not in ("checkout", "redis", "isolation"):
            raise LabError(f"bench {what!r}: expected checkout, redis or isolation")
        if (what == "isolation") != (specs is not None):
            raise LabError("bench: --specs DIR goes with isolation, and isolation needs it")
        if (n is not None and n < 1) or rounds < 1:
            raise LabError("bench: -n and --rounds must be at least 1")
        if scale and (what != "checkout" or n is not None):
            raise LabError("bench --scale: the checkout curve has its own n; drop -n / redis")
        run_id = new_run_id()
        short = run_id.replace("-", "")[-8:]
        if what == "isolation":
            assert specs is not None
            data = _bench_isolation(specs, lanes, pg_dsn)
            name = "isolation.json"
        elif what == "redis":
            from lab.bench import REDIS_SIZES

            data = _bench_redis(short, (n,) if n else REDIS_SIZES, procs, redis_client, redis_url)
            name = "redis.json"
        elif scale:
            data = _bench_scale(short, rounds, pg_dsn)
            name = "scale.json"
        else:
            data = _bench_checkout(short, n or 200, rounds, pg_dsn)
            name = "result.json"
        if not no_record:  # beside run records, in a subfolder: not a scenario run
            path = results_root() / run_id / "bench" / name
            write_json(path, {**data, "git_commit": git_commit()})
            err().print(f"[dim]record: {path}[/dim]")
        if as_json:
            sys.stdout.write(json.dumps(data, default=str) + "\n")
            return
        from lab import bench_report

        bench_report.print_bench(out(), what, scale, data)

    guarded(body)


def _bench_checkout(run_id: str, n: int, rounds: int, pg_dsn: str | None) -> dict[str, Any]:
    from lab.bench import run_bench

    with open_servers(pg_dsn, None, need_redis=False) as srv:
        report.servers(err(), srv.infos(), srv.notes)
        with err().status(f"bench: {rounds} rounds of {n} clients ..."):
            res = asyncio.run(run_bench(srv, n, rounds, run_id))
        return {**res.to_json(), "servers": {i.product: i.to_json() for i in srv.infos()}}


def _bench_isolation(folder: Path, lanes: int, pg_dsn: str | None) -> dict[str, Any]:
    from lab.servers.versions import open_for
    from lab.spec.bench import run_bench as run_isolation

    with open_for(pg_dsn, None, None, None, need_pg=True, need_redis=False) as srv:
        report.servers(err(), srv.infos(), srv.notes)
        assert srv.pg is not None
        with err().status("bench isolation: pg_isolation_regress, then the lab ..."):
            res = run_isolation(folder, srv.pg.dsn, srv.pg.bindir, lanes)
        return {**res, "servers": {i.product: i.to_json() for i in srv.infos()}}


def _bench_scale(run_id: str, rounds: int, pg_dsn: str | None) -> dict[str, Any]:
    from lab.bench import SCALE_NS, run_scale
    from lab.servers.embedded import find_pgbouncer

    try:
        find_pgbouncer()
        bouncer = pg_dsn is None and not os.environ.get("LOCKLAB_PG_DSN")
    except LabError:
        bouncer = bool(os.environ.get("LOCKLAB_PGBOUNCER_DSN"))
    with open_servers(pg_dsn, None, need_redis=False, need_pgbouncer=bouncer) as srv:
        report.servers(err(), srv.infos(), srv.notes)
        with err().status(f"bench --scale: n = {', '.join(map(str, SCALE_NS))}, {rounds} rounds"):
            points, version = asyncio.run(run_scale(srv, SCALE_NS, rounds, run_id))
        return {
            "rounds": rounds,
            "points": [p.to_json() for p in points],
            "pgbench": version,
            "servers": {i.product: i.to_json() for i in srv.infos()},
        }


def _bench_redis(
    run_id: str,
    sizes: Sequence[int],
    procs: str | None,
    redis_client: str | None,
    redis_url: str | None,
) -> dict[str, Any]:
    """The stampede at each size, each followed by redis-benchmark on the same Redis."""
    from lab.bench import run_redis_bench

    k = parse_procs(procs) if procs is not None else 0
    mode = parse_redis_client(redis_client or "pipelined")
    points = []
    with open_servers(None, redis_url, need_pg=False, need_redis=True) as srv:
        report.servers(err(), srv.infos(), srv.notes)
        for n in sizes:
            with err().status(f"bench redis: {n} waiters, then redis-benchmark ..."):
                points.append(
                    asyncio.run(run_redis_bench(srv, run_id, n=n, procs=k, redis_client=mode))
                )
        return {"points": points, "servers": {i.product: i.to_json() for i in srv.infos()}}


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
            sc, list(sc.variants), "quick" if quick else "published", case, param, not no_record,
            n=n, arrival=arrival, connect=connect, deadlock_timeout=deadlock_timeout, seed=seed,
            actor_timeout=actor_timeout, run_timeout=run_timeout, rtt=rtt, procs=procs,
            redis_client=redis_client,
        )  # fmt: skip
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
            help="Runs side by side in lane processes: auto (quick: 5, published: 1) or K."
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

        from lab.lanes import lanes_for, parse_lanes, plan_jobs, run_lanes
        from lab.profiles import check_profile, profile_settings
        from lab.results import new_run_id
        from lab.runner import drop_spares
        from lab.verify import (
            coverage,
            judge_across,
            print_summary,
            print_verdicts,
            save_verdicts,
            steps,
            summarize,
            verify_recorded,
        )
        from scenarios import SCENARIOS, by_id

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
        run_id, width = "", 1
        schedule: list[dict[str, Any]] = []
        if recorded is not None:
            only = [s.id for s in chosen] if scenarios else []
            results = verify_recorded(recorded, by_id(), profile, only, trials)
        else:
            run_id = new_run_id()
            total = sum(steps(s, profile, trials, counterfactual) for s in chosen)
            results = []
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
                    if width > 1:
                        bar.describe(f"verify {profile} on {width} lanes")
                        results = asyncio.run(
                            run_lanes(
                                plan_jobs(chosen, profile, trials, counterfactual), width, srv,
                                profile=profile, run_id=run_id, seed=seed, trials=trials,
                                write=not no_record, on_step=bar.advance, schedule=schedule,
                                counterfactual=counterfactual,
                            )
                        )  # fmt: skip
                        for res in results:
                            if res.error:
                                log.print(f"locklab: {res.scenario} {res.case} failed: "
                                          f"{res.error}", markup=False)  # fmt: skip
                    else:
                        results = _verify_here(chosen, profile, srv, bar, log, run_id=run_id,
                                               seed=seed, trials=trials, write=not no_record,
                                               counterfactual=counterfactual)  # fmt: skip
            for sc in chosen:  # claims that compare a scenario's cases
                if (across := judge_across(sc, profile, results)) is not None:
                    results.append(across)
        summary = summarize(results, results[0].profile if results else profile)
        wall = time.perf_counter() - started
        covered = coverage(results, SCENARIOS)
        if run_id and not no_record:
            save_verdicts(run_id, results, summary, covered, wall, lanes=width, schedule=schedule)
        if as_json:
            doc = {
                "run_id": run_id or recorded,
                "summary": summary.to_json(),
                "wall_s": round(wall, 1),
                "lanes": width,
                "schedule": schedule,
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
            print_summary(console, summary, wall, lanes=width)
        if not summary.ok or (counterfactual and summary.cannot_fail):
            raise typer.Exit(1)

    guarded(body)


def _verify_here(
    chosen: Sequence[Scenario],
    profile: str,
    srv: Servers,
    bar: report.DelayedProgress,
    log: Console,
    *,
    run_id: str,
    seed: int,
    trials: int | None,
    write: bool,
    counterfactual: bool = False,
) -> list[Any]:
    """verify in the lab's own process (one lane): the loads one after another, then the
    explores, EXPLORES_AT_ONCE parts side by side (lab/verify.py)."""
    from lab.verify import explore_claims, verify_explores, verify_plan, verify_scenario

    results: list[Any] = []
    runs = verify_plan(chosen, profile, trials)
    for i, (sc, case) in enumerate(runs):
        name = f"{sc.id} [{case}]" if case else sc.id
        bar.describe(f"verify {profile}: {name}")
        res = asyncio.run(
            verify_scenario(
                sc, profile, srv, run_id=run_id, seed=seed, trials=trials,
                write=write, on_step=bar.advance, case=case,
                spare=i + 1 < len(runs), counterfactual=counterfactual,
            )
        )  # fmt: skip
        if res.error:
            log.print(f"locklab: {name} failed: {res.error}", markup=False)
        results.append(res)
    # claims about every interleaving (lab/pinned.py), explores side by side
    explored = [sc for sc in chosen if explore_claims(sc, profile)]
    if explored:
        bar.describe(f"verify {profile}: explore {len(explored)} scenario(s)")
    for ex in asyncio.run(
        verify_explores(
            explored,
            profile,
            srv,
            run_id=run_id,
            write=write,
            on_step=bar.advance,
            counterfactual=counterfactual,
        )
    ):
        if ex.error:
            log.print(f"locklab: {ex.scenario} explore failed: {ex.error}")
        results.append(ex)
    return results


def _verify_matrix(
    chosen: list[Scenario],
    profile: str,
    seed: int,
    trials: int | None,
    write: bool,
    as_json: bool,
) -> None:
    """verify --matrix: claims x server versions (lab/matrix.py); exit 1 if a claim does
    not hold on some version, as verify does."""
    import time

    from lab.matrix import columns, print_matrix, run_matrix
    from lab.results import new_run_id
    from lab.verify import summarize

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
            chosen, profile, cols, run_id=run_id, seed=seed, trials=trials, write=write,
            on_column=on_column, on_step=on_step,
        )  # fmt: skip
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


# --- trace and explore: the pinned sessions (lab/pinned.py) ------------------------------

Isolation = Annotated[
    str | None,
    typer.Option(help="Comma list of read_committed, repeatable_read, serializable."),
]


SvgFile = Annotated[
    str | None,
    typer.Option(
        "--svg",
        help="Also draw the runs into this SVG file: a lane per session, each step at its "
        "measured time, waits, errors, the invariants.",
    ),
]


@app.command("trace")
def trace_cmd(
    scenario: ScenarioId,
    variant: Annotated[
        str, typer.Option("--variant", "-v", help="A variant, a comma list, or all.")
    ] = "all",
    schedule: Annotated[
        str | None,
        typer.Option(help="A canonical schedule's name, or steps: 's1 read, s2 read, ...'."),
    ] = None,
    isolation: Isolation = None,
    deadlock_timeout: DeadlockTimeout = None,
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
) -> None:
    """Print the transcript of a schedule: each step, its SQL and result, who waited. A
    PostgreSQL isolation spec (FILE.spec) prints exactly what its isolation tester prints."""
    if scenario.endswith(".spec"):
        extra = {
            "--variant": variant != "all",
            "--schedule": schedule is not None,
            "--isolation": isolation is not None,
            "--svg": svg is not None,
            "--deadlock-timeout": deadlock_timeout is not None,
        }
        given = [name for name, on in extra.items() if on]

        def spec() -> None:
            if given:  # the spec says its sessions, steps and permutations itself
                raise LabError(f"{', '.join(given)}: not for an isolation spec ({scenario})")
            _trace_spec(Path(scenario), pg_dsn, pg_version, expected)

        guarded(spec)
        return

    def body() -> None:
        from lab.pinned import (
            draw_svg,
            isolation_levels,
            schedules_for,
            svg_target,
            trace,
            trace_record,
            write_trace,
        )
        from lab.results import new_run_id

        if expected is not None:
            raise LabError("--expected diffs an isolation spec's output: give a FILE.spec")
        sc = find_scenario(scenario)
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
                trace(sc, srv, runs, levels, run_id=run_id, deadlock_ms=dl, on_result=show)
            )
            record = trace_record(sc, srv, done, run_id=run_id, deadlock_ms=dl)
        if picture is not None:
            log.print(draw_svg(record, picture), markup=False)
        if not no_record:
            log.print(f"[dim]record: {write_trace(record)}[/dim]")

    guarded(body)


def _trace_spec(
    path: Path, pg_dsn: str | None, pg_version: str | None, expected: Path | None
) -> None:
    """`locklab trace FILE.spec`: the spec run on the lab's PostgreSQL, a database of its
    own; stdout is the isolation tester's output, everything else stderr."""
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
        from lab.results import new_run_id
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
    scenario: ScenarioId,
    variant: Annotated[
        str, typer.Option("--variant", "-v", help="A variant, a comma list, or all.")
    ] = "all",
    isolation: Isolation = None,
    deadlock_timeout: Annotated[
        int | None,
        typer.Option("--deadlock-timeout", help="PostgreSQL deadlock_timeout in ms (default 100)."),
    ] = None,
    pg_dsn: PgDsn = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the explore record only.")] = False,
    no_record: NoRecord = False,
    svg: SvgFile = None,
) -> None:
    """Run every interleaving of the sessions' steps; per variant and isolation level, how
    many kept the invariants and how the others broke them. An isolation spec (FILE.spec):
    every interleaving of its steps, per isolation level, how each ended."""
    if scenario.endswith(".spec"):
        extra = {"--variant": variant != "all", "--svg": svg is not None}
        given = [name for name, on in extra.items() if on]
        extra_dl = deadlock_timeout

        def spec() -> None:
            if given:
                raise LabError(f"{', '.join(given)}: not for an isolation spec ({scenario})")
            _explore_spec(Path(scenario), isolation, extra_dl, pg_dsn, as_json, no_record)

        guarded(spec)
        return

    def body() -> None:
        from lab.pinned import (
            draw_svg,
            explore,
            isolation_levels,
            pinned_of,
            print_explore,
            svg_target,
            write_explore,
        )
        from lab.results import new_run_id

        sc = find_scenario(scenario)
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
                    explore(sc, srv, plan, run_id=run_id, deadlock_ms=dl, on_progress=bar.advance)
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

    guarded(body)


def _explore_spec(
    path: Path,
    isolation: str | None,
    deadlock_ms: int | None,
    pg_dsn: str | None,
    as_json: bool,
    no_record: bool,
) -> None:
    from lab.results import new_run_id, write_json
    from lab.servers.versions import open_for
    from lab.spec.explore import explore_spec, levels_for, table_lines
    from lab.spec.parse import read_spec

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


# --- the lab on the user's own code, servers and versions (issue 11) -------------------


@app.callback()
def _options(
    results_dir: Annotated[
        str | None,
        typer.Option(
            "--results-dir",
            help="Where records go (default ./results of the current folder; env LOCKLAB_RESULTS).",
        ),
    ] = None,
) -> None:
    """Reproduce concurrency bugs and their fixes against real PostgreSQL and Redis."""
    if results_dir:
        os.environ["LOCKLAB_RESULTS"] = results_dir  # read by lab.results.results_root()


@app.command()
def locks(
    pg_dsn: Annotated[
        str | None,
        typer.Option(
            "--pg-dsn",
            help="Server to look at (env LOCKLAB_PG_DSN; default: the kept servers). "
            "Any role works; pg_monitor shows other users' queries.",
        ),
    ] = None,
    database: Annotated[
        str | None, typer.Option("--database", "-d", help="Only this database's sessions.")
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", help="Redraw live until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between redraws in --watch.")] = 1.0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Who blocks whom: the pg_blocking_pids() tree, each waiter's lock, wait and holder (read-only)."""

    def body() -> None:
        from lab import locks as lk
        from lab.servers import kept_servers
        from lab.servers.base import check_url

        dsn = pg_dsn or os.environ.get("LOCKLAB_PG_DSN")
        if not dsn:
            kept = kept_servers()
            if kept is None or kept.pg is None:
                raise LabError(
                    "locks: give --pg-dsn (or LOCKLAB_PG_DSN), or start `locklab servers up`"
                )
            dsn = kept.pg.dsn
        check_url(dsn, ("postgresql", "postgres"), "PostgreSQL DSN")
        if not 0.1 <= interval < math.inf:
            raise LabError(f"--interval {interval}: at least 0.1 s")
        if watch:
            if as_json:
                raise LabError("--watch draws in the terminal; --json prints once")
            lk.watch(out(), dsn, database, interval)
            return
        sessions = asyncio.run(lk.snapshot(dsn, database))
        if as_json:
            sys.stdout.write(lk.to_json(sessions) + "\n")
        else:
            console = _tables()
            console.print(lk.render(sessions))
            if any(s.query == "<insufficient privilege>" for s in sessions):
                console.print(f"[dim]{lk.ROLE_NOTE}[/dim]")

    guarded(body)  # Ctrl-C is how --watch ends: lab/locks.py watch() returns quietly


@app.command("new")
def new_cmd(
    name: Annotated[str, typer.Argument(help="The scenario's name, e.g. my-checkout.")],
    folder: Annotated[
        str, typer.Option("--dir", help="Folder to write NAME.py into (default: here).")
    ] = ".",
) -> None:
    """Write a scenario skeleton (buggy/fixed pair, a schedule, a claim) to ./NAME.py."""

    def body() -> None:
        from pathlib import Path

        from lab.new import write_skeleton

        path = write_skeleton(name, Path(folder))
        shown = f"./{path.name}" if folder == "." else str(path)
        out().print(f"wrote {shown}; next: locklab trace {shown}", markup=False)

    guarded(body)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
