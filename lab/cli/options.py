"""The options commands share, and turning what was typed into the lab's objects:
scenarios, variants, knobs, a run plan, servers."""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Annotated, Any, TypeVar, cast

import typer

from lab.core.knobs import Knobs, parse_arrival, parse_connect, parse_redis_client
from lab.core.profiles import Profile
from lab.core.scenario import Scenario, check_params
from lab.errors import LabError
from lab.load.plan import RunPlan
from lab.procs.netdelay import SERVERS, parse_rtt
from lab.servers import Servers


def find_scenario(name: str) -> Scenario:
    """A catalogue id, or the path of a scenario file (lab/core/loader.py)."""
    from scenarios import IDS, get

    if name in IDS:
        return get(name)  # only its own module is imported
    from lab.core.loader import looks_like_path

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
    from lab.core.loader import load_path, looks_like_path
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
        if v not in scenario.variants and v not in scenario.mutants:  # a mutant by name only
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
    scenario: Scenario, variants: Sequence[str], profile: Profile, o: LoadOptions
) -> RunPlan:
    """The plan of `run` and `compare`: a profile's settings (and a case's), then the
    options the user gave (None where not given)."""
    from lab.core.profiles import profile_settings
    from lab.core.results import new_run_id

    base, base_params = profile_settings(scenario, profile, o.seed, o.case or "")
    knobs = make_knobs(
        scenario,
        o.n,
        o.arrival,
        o.connect,
        o.deadlock_timeout,
        o.seed,
        o.actor_timeout,
        o.run_timeout,
        base,
        o.rtt,
        o.procs,
        o.redis_client,
    )
    params = parse_params(scenario, o.param or [], base_params)
    check_params(scenario, knobs.n, params)  # before any server starts
    return RunPlan(
        scenario, variants, knobs, params, new_run_id(), write=not o.no_record, case=o.case or ""
    )


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


@dataclass(frozen=True)
class LoadOptions:
    """What `run` and `compare` both take: the knobs, the params, the servers, the output.
    Declared once (`_load_options` below); `load_options` gives a command all of them."""

    n: int | None = None
    arrival: str | None = None
    connect: str | None = None
    deadlock_timeout: int | None = None
    seed: int = 1
    case: str | None = None
    rtt: str | None = None
    actor_timeout: float | None = None
    run_timeout: float | None = None
    param: list[str] | None = None
    pg_dsn: str | None = None
    redis_url: str | None = None
    as_json: bool = False
    no_record: bool = False
    pg_version: str | None = None
    redis_version: str | None = None
    procs: str | None = None
    redis_client: str | None = None


def _load_options(
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
    """The options of LoadOptions as Typer reads them (a signature, never called)."""


F = TypeVar("F", bound=Callable[..., None])


def load_options(command: F) -> F:
    """Give `command` (whose last parameter is `o: LoadOptions`) LoadOptions' options on
    the command line, after its own; it is called with them as one LoadOptions."""
    hints = typing.get_type_hints(command, include_extras=True)
    hints |= typing.get_type_hints(_load_options, include_extras=True)
    own = [
        p.replace(annotation=hints[p.name])
        for p in inspect.signature(command).parameters.values()
        if p.name != "o"
    ]
    shared = [
        p.replace(annotation=hints[p.name])
        for p in inspect.signature(_load_options).parameters.values()
    ]
    names = {f.name for f in fields(LoadOptions)}
    if names != {p.name for p in shared}:  # the two lists are written apart: keep them one
        raise TypeError(f"LoadOptions and _load_options differ: {names ^ {p.name for p in shared}}")

    @functools.wraps(command)
    def wrapper(**kw: Any) -> None:
        o = LoadOptions(**{k: kw.pop(k) for k in names})
        command(**kw, o=o)

    wrapper.__signature__ = inspect.Signature([*own, *shared])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in [*own, *shared]}
    return cast(F, wrapper)
