"""The contract between a scenario module and the harness.

A scenario module defines a ``SCENARIO = Scenario(...)``; the harness never imports
anything else from it. Two kinds:

* ``actors``: every variant is ``async def variant(env, conn, actor) -> str``, run by N
  actors under the workload knobs (arrival, connections, timeouts); the harness counts
  the returned business word, or the SQLSTATE the actor raised.
* ``script``: every variant is ``async def variant(env) -> None``, a choreography of its
  own (pauses, crashes, processes) that reports ends with ``env.outcome(word)``.

Scenarios know nothing of where servers come from or how results are stored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Unpack

from lab.core.claims import Claim
from lab.core.env import Actor as Actor
from lab.core.env import Env as Env
from lab.core.published import Measured, published_line
from lab.core.records import InvariantJson
from lab.core.steps import Pinned
from lab.errors import LabError

Script = Callable[["Env"], Awaitable[None]]
Setup = Callable[["Env"], Awaitable[None]]
Invariant = Callable[["Env"], Awaitable[list["Check"]]]


def executes(*statements: str) -> Setup:
    """A setup (or schema) that runs these SQL statements on the run's database, in order."""

    async def run(env: Env) -> None:
        for sql in statements:
            await env.db.execute(sql)

    return run


@dataclass(frozen=True)
class Observer:
    """Something that watches a run from the side (a sampler, a MONITOR, a poller of
    pg_locks), with a lifecycle the harness owns: `start` after setup, before the
    variant runs; `stop` after the variant ended (always, also when it failed), before
    the invariants are checked. What it saw goes on `env.state` or `env.extra_evidence`."""

    name: str
    start: Callable[[Env], Awaitable[None]]
    stop: Callable[[Env], Awaitable[None]]


async def start_observers(observers: tuple[Observer, ...], env: Env) -> list[Observer]:
    """Start each observer in order; the ones started so far are returned even when a
    later one fails (the caller stops those)."""
    started: list[Observer] = []
    try:
        for ob in observers:
            await ob.start(env)
            started.append(ob)
    except BaseException:
        await stop_observers(started, env)
        raise
    return started


async def stop_observers(started: list[Observer], env: Env) -> None:
    """Stop the started observers, last first; every one is stopped even if one fails,
    and the first failure is raised after."""
    first: BaseException | None = None
    for ob in reversed(started):
        try:
            await ob.stop(env)
        except Exception as exc:  # the others still stop
            first = first or exc
    started.clear()
    if first is not None:
        raise first


@dataclass(frozen=True)
class Check:
    """One invariant, checked against the database or Redis after a run."""

    name: str
    held: bool
    detail: str

    def to_json(self) -> InvariantJson:
        return {"name": self.name, "held": self.held, "detail": self.detail}


@dataclass(frozen=True)
class Param:
    """A scenario knob, `-p NAME=VALUE`: its default (the published setup), what it changes,
    and the values it takes. `min` and `above` bound a number (>= min, > above); `choices`
    lists the values allowed. The harness checks every -p value against it before any
    server starts (check_params); what a bound cannot say stays in `Scenario.validate`."""

    default: Any
    help: str = ""
    min: float | None = None
    above: float | None = None
    choices: tuple[Any, ...] = ()

    def bounds(self) -> str:
        """What it takes, for `locklab show`: "one of a, b", ">= 1", "> 0" ("" = anything)."""
        if self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        parts = [f">= {self.min:g}" if self.min is not None else ""]
        parts.append(f"> {self.above:g}" if self.above is not None else "")
        return ", ".join(x for x in parts if x)

    def check(self, name: str, value: Any) -> None:
        unit = next((f" {u}" for u in ("ms", "s") if name.endswith(f"_{u}")), "")
        if self.choices:
            if value not in self.choices:
                shown = ", ".join(map(str, self.choices))
                raise LabError(f"-p {name}={value!r}: one of {shown}")
            return
        if self.min is None and self.above is None:
            return
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise LabError(f"-p {name}={value!r}: a number")
        if self.min is not None and value < self.min:
            raise LabError(f"-p {name}={value}: at least {self.min:g}{unit}")
        if self.above is not None and value <= self.above:
            raise LabError(f"-p {name}={value}: more than {self.above:g}{unit}")


@dataclass(frozen=True)
class Pgbench:
    """What `locklab bench` runs through pgbench beside the lab: the SQL that makes the
    table pgbench works on, and the script of one transaction (pgbench's language), the
    `fixed` variant's statements."""

    setup: tuple[str, ...]
    script: str


@dataclass(frozen=True)
class Defaults:
    """Workload knobs a scenario runs with unless the user says otherwise."""

    n: int = 200
    arrival: str = "burst"
    connect: str = "per-actor"
    deadlock_timeout_ms: int = 1000
    actor_timeout_s: float = 120.0
    run_timeout_s: float = 900.0
    # How the actors' Redis commands travel (--redis-client): "pooled" (redis-py, a
    # connection per command in flight) or "pipelined" (one connection, every caller's
    # command written without waiting for earlier replies: node-redis's and ioredis's way)
    redis_client: str = "pooled"


@dataclass(frozen=True)
class Scenario:
    id: str
    doc: str
    kind: Literal["actors", "script"]
    variants: Mapping[str, Callable[..., Awaitable[Any]]]
    outcomes: tuple[str, ...]  # every key a variant may end with (words and SQLSTATEs)
    claims: tuple[Claim, ...] = ()
    published: Mapping[str, str] = field(default_factory=dict)  # variant -> the line printed
    # variant -> the runs the documents published, as numbers (lab.core.published); the
    # record keeps them, claims and the report read them
    measured: Mapping[str, tuple[Measured, ...]] = field(default_factory=dict)
    setup: Setup | None = None  # every run: the rows (and, without `schema`, the DDL)
    # The DDL (tables, indexes, functions), when declared apart from `setup`: a load runs it
    # before setup; pinned runs once per database, then empty the tables (lab/pinned/fastreset.py)
    schema: Setup | None = None
    invariant: Invariant | None = None
    defaults: Defaults = Defaults()
    # -p knobs: NAME -> Param (default, help, bounds), or a plain default; after init,
    # `params` holds the defaults, `param_help` the help and `param_specs` the Params
    params: Mapping[str, Any] = field(default_factory=dict)
    param_help: Mapping[str, str] = field(default_factory=dict)
    uses: frozenset[str] = frozenset({"pg"})  # "pg", "redis"
    # Cases ("" = the profile's own settings) whose claims are about how much this machine
    # can do (a client-bound rate) or read a server-wide figure (the WAL position): verify
    # runs them with no other run beside them (lab/verify/lanes.py).
    alone: tuple[str, ...] = ()
    # Cases whose claims are real time (a pause against a TTL, ~100 ms apart): verify runs
    # them beside other such cases only, never beside the CPU-bound runs (lab/verify/lanes.py).
    timed: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()  # "DL", "LC", "DP"
    # counter -> label shown in result lines, the documents' way: GETs=2739, DB calls=1
    headline: Mapping[str, str] = field(default_factory=dict)
    quick: Mapping[str, Any] = field(default_factory=dict)
    # Named settings verify runs besides the profile's own (knob or param overrides applied
    # on top of it), for claims only they exercise: failure modes, other isolation levels.
    cases: Mapping[str, Mapping[str, Any]] = field(
        default_factory=dict
    )  # knob/param overrides for verify
    # PostgreSQL connections a script opens for -n actors, so a run too big for the
    # server is refused before it starts (actor scenarios count theirs from --connect).
    script_connections: Callable[[int], int] | None = None
    # Rejects impossible -n / -p values with LabError, before any server or database is
    # touched (the CLI calls it before starting servers; the runner before every plan).
    validate: Callable[[int, Mapping[str, Any]], None] | None = None
    # Session code with declared steps and schedules (lab/core/steps.py): `variants` are then
    # its load actors, and `locklab trace` / `explore` run it pinned.
    pinned: Pinned | None = None
    # Sharded runs (--procs, lab.load.shard): `setup` runs once in the lab's own process;
    # `worker_setup` in every process that runs actors (per-process state, connections),
    # `worker_done` there after its actors ended (settle tasks, leave evidence).
    worker_setup: Setup | None = None
    worker_done: Setup | None = None
    # With --procs auto (the default): one worker process per this many actors, at most
    # `procs_per_core` per core; 0 keeps every run in one process. More than one per core
    # suits actors that mostly wait on timers (a poll): each process handles its actors'
    # replies and wake-ups one batch at a time, and more processes overlap those batches.
    actors_per_process: int = 0
    procs_per_core: int = 1
    # Watchers the harness starts after setup and stops after the variant (Observer).
    observers: tuple[Observer, ...] = ()
    # `locklab bench`: the pgbench reference this scenario's fixed variant is timed against,
    # and the case `bench redis` runs against redis-benchmark ("" = none).
    pgbench: Pgbench | None = None
    bench_redis: str = ""
    # Code mutants: the code with its fix removed or its guard dropped ("mutant-..."), run
    # only as the counterfactual a claim names (`lab.core.claims.on_mutant`): `run`,
    # `compare` and verify's own runs leave them out; `-v mutant-...` runs one by name.
    mutants: Mapping[str, Callable[..., Awaitable[Any]]] = field(default_factory=dict)
    # filled from `params` (kept when a Scenario is copied with dataclasses.replace)
    param_specs: Mapping[str, Param] = field(default_factory=dict)

    def __post_init__(self) -> None:
        specs = {k: v for k, v in self.params.items() if isinstance(v, Param)}
        if specs or self.param_specs:
            specs = {**self.param_specs, **specs}
            defaults = {k: v.default if isinstance(v, Param) else v for k, v in self.params.items()}
            helps = {k: v.help for k, v in specs.items() if v.help}
            object.__setattr__(self, "params", defaults)
            object.__setattr__(self, "param_help", {**helps, **self.param_help})
            object.__setattr__(self, "param_specs", specs)
        # a variant with published runs prints the line made from them (lab.core.published),
        # unless the scenario words it itself
        if self.measured:
            lines = {v: published_line(runs) for v, runs in self.measured.items()}
            object.__setattr__(self, "published", {**lines, **self.published})

    def code(self, variant: str) -> Callable[..., Awaitable[Any]]:
        """A variant's code, or a mutant's (named apart, run only when asked by name)."""
        return self.variants[variant] if variant in self.variants else self.mutants[variant]

    @property
    def title(self) -> str:
        return self.doc.strip().splitlines()[0]

    def section(self, name: str) -> str:
        """The docstring's `Name:` section (Symptom, Root cause, Fix, Published, See)."""
        lines = self.doc.strip().splitlines()
        out: list[str] = []
        inside = False
        for line in lines:
            head, colon, rest = line.partition(":")
            if colon and head.strip() and not line.startswith(" "):
                if inside:
                    break
                if head.strip() == name:
                    inside = True
                    out.append(rest.strip())
                    continue
            elif inside:
                out.append(line.strip())
        return " ".join(x for x in out if x)


class Declared(TypedDict, total=False):
    """What a claims.py may give `declare` beside its code module: Scenario's fields, so
    mypy checks every keyword (a test keeps the two the same)."""

    id: str
    doc: str
    kind: Literal["actors", "script"]
    variants: Mapping[str, Callable[..., Awaitable[Any]]]
    outcomes: tuple[str, ...]
    claims: tuple[Claim, ...]
    published: Mapping[str, str]
    measured: Mapping[str, tuple[Measured, ...]]
    setup: Setup | None
    schema: Setup | None
    invariant: Invariant | None
    defaults: Defaults
    params: Mapping[str, Any]
    param_help: Mapping[str, str]
    uses: frozenset[str]
    alone: tuple[str, ...]
    timed: tuple[str, ...]
    sources: tuple[str, ...]
    headline: Mapping[str, str]
    quick: Mapping[str, Any]
    cases: Mapping[str, Mapping[str, Any]]
    script_connections: Callable[[int], int] | None
    validate: Callable[[int, Mapping[str, Any]], None] | None
    pinned: Pinned | None
    worker_setup: Setup | None
    worker_done: Setup | None
    actors_per_process: int
    procs_per_core: int
    observers: tuple[Observer, ...]
    pgbench: Pgbench | None
    bench_redis: str
    mutants: Mapping[str, Callable[..., Awaitable[Any]]]
    param_specs: Mapping[str, Param]


def declare(code: ModuleType, **given: Unpack[Declared]) -> Scenario:
    """A Scenario from the module of its code under test, with only what the module cannot
    say given: its id from the module's file (scenarios/my_bug/my_bug.py, or a single
    file my_bug.py: my-bug), its doc from the module's docstring, its
    `schema`, `setup` and `invariant` where the module defines them, and its `PINNED`
    with, unless `variants` are given, PINNED's load actors as the variants. What is
    given wins."""
    derived: dict[str, Any] = {
        "id": Path(code.__file__ or code.__name__).stem.replace("_", "-"),
        "doc": code.__doc__ or "",
    }
    for name in ("schema", "setup", "invariant"):
        if callable(found := getattr(code, name, None)):
            derived[name] = found
    pinned = given.get("pinned", getattr(code, "PINNED", None))
    if isinstance(pinned, Pinned):
        derived["pinned"] = pinned
        if "variants" not in given:
            derived.update(variants=pinned.actors(), kind="actors")
    return Scenario(**{**derived, **dict(given)})


def check_params(sc: Scenario, n: int, params: Mapping[str, Any]) -> None:
    """Every -p value against its Param, then the scenario's own validate: one LabError
    line for the first that is impossible (before any server or database is touched)."""
    for name, spec in sc.param_specs.items():
        if name in params:
            spec.check(name, params[name])
    if sc.validate is not None:
        sc.validate(n, params)
