"""explore and trace with --actor: unchanged programs through the gate."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lab.cli.base import err, out
from lab.errors import LabError
from lab.gate.actors import Actor
from lab.gate.explore import explore, trace
from lab.gate.keys import setup_commands
from lab.gate.spec import Exported, export
from lab.gate.workspace import RedisPlan
from lab.output import console as report
from lab.output.actors import print_exploration, print_order
from lab.servers import open_servers
from lab.servers.redisnodes import RedisNodes

# Explore's own databases get a short deadlock_timeout: a deadlocking order then costs
# 0.1 s, not PostgreSQL's default second (--deadlock-timeout when it is the subject).
DEADLOCK_MS = 100


@dataclass(frozen=True)
class Stores:
    """What the actors get beyond PostgreSQL: the Redis setup's file, an invariant command,
    the actors whose Redis leases may run out (None: every actor's)."""

    redis_setup: Path | None = None
    invariant_cmd: str | None = None
    pauses: list[int] | None = None

    def check(self, actors: list[Actor]) -> list[list[str]]:
        """Impossible values, refused before any server starts; the Redis setup's commands."""
        bad = [n for n in self.pauses or [] if not 1 <= n <= len(actors)]
        if bad:
            raise LabError(f"--pause {bad[0]}: actors are numbered 1 to {len(actors)}")
        if self.invariant_cmd is not None and not self.invariant_cmd.strip():
            raise LabError("--invariant-cmd: an empty command")
        return setup_commands(_read(self.redis_setup, "--redis-setup"))


@contextmanager
def _redis(stores: Stores, setup: list[list[str]]) -> Iterator[RedisPlan | None]:
    """A Redis of the actors' own, emptied before every order: when redis-server is here
    (a run that asks for Redis and finds none says so)."""
    try:
        nodes = RedisNodes.prepare(1)
    except LabError as exc:
        if stores.redis_setup is not None or stores.pauses:
            raise LabError(f"--redis-setup/--pause need Redis: {exc}") from None
        yield None
        return
    try:
        nodes.start()
        pauses = frozenset(stores.pauses) if stores.pauses else None
        yield RedisPlan(nodes.urls()[0], setup, pauses)
    finally:
        nodes.close()


def _read(path: Path | None, what: str) -> str:
    if path is None:
        return ""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LabError(f"{what} {path}: {exc.strerror}") from None


def actors_of(commands: list[str]) -> list[Actor]:
    if len(commands) < 2:
        raise LabError("give at least two --actor commands: an order needs two of them")
    return [Actor(i, c) for i, c in enumerate(commands, 1)]


def schedule_of(text: str, actors: list[Actor]) -> list[int | str]:
    """'1,2,1,2': the actor of each statement in turn; 't1': actor 1 held until its Redis
    lease runs out."""
    words = [word for word in text.replace(" ", "").split(",") if word]
    try:
        schedule: list[int | str] = [w if w.startswith("t") else int(w) for w in words]
        numbers = [int(w[1:]) if isinstance(w, str) else w for w in schedule]
    except ValueError:
        raise LabError(f"--schedule {text!r}: actor numbers separated by commas") from None
    unknown = sorted({a for a in numbers if not 1 <= a <= len(actors)})
    if unknown or not schedule:
        raise LabError(f"--schedule {text!r}: actors are numbered 1 to {len(actors)}")
    return schedule


@dataclass(frozen=True)
class Asked:
    """What explore --actor was asked for beyond the actors: a bound, the first failure,
    JSON, a spec file."""

    max_orders: int | None
    first: bool
    as_json: bool
    spec: Path | None
    all_orders: bool = False
    exhaustive: bool = False
    seed: int = 1

    def check(self) -> None:
        """Impossible values, refused before any server starts."""
        if self.max_orders is not None and self.max_orders < 1:
            raise LabError(f"--max {self.max_orders}: must be at least 1")
        if self.spec is not None and self.spec.suffix != ".spec":
            raise LabError(f"--spec {self.spec}: name it FILE.spec (FILE.out is written beside it)")


@dataclass(frozen=True)
class Gated:
    """The actors, the setup SQL copied per order, the invariant, the deadlock_timeout."""

    actors: list[Actor]
    schema: str
    check: str
    deadlock_ms: int


def gated(
    commands: list[str], setup: Path | None, invariant: Path | None, deadlock_ms: int | None
) -> Gated:
    """Reads the files and checks the values, before any server starts."""
    actors = actors_of(commands)
    dl = DEADLOCK_MS if deadlock_ms is None else deadlock_ms
    if dl < 1:
        raise LabError(f"--deadlock-timeout {dl}: must be at least 1 ms")
    check = _read(invariant, "--invariant") or "SELECT true"
    return Gated(actors, _read(setup, "--setup"), check, dl)


@contextmanager
def _postgres(pg_dsn: str | None) -> Iterator[str]:
    """The lab's PostgreSQL (or --pg-dsn's), named on stderr; its DSN."""
    with open_servers(pg_dsn, None, need_redis=False) as srv:
        assert srv.pg is not None
        report.servers(err(), srv.infos(), srv.notes)
        yield srv.pg.dsn


def explore_actors(
    commands: list[str],
    setup: Path | None,
    invariant: Path | None,
    pg_dsn: str | None,
    deadlock_ms: int | None,
    asked: Asked,
    stores: Stores = Stores(),
) -> None:
    """`locklab explore --actor ...`: every order, counted; the first broken one as a spec."""
    run = gated(commands, setup, invariant, deadlock_ms)
    asked.check()
    redis_setup = stores.check(run.actors)
    exported = None
    with _postgres(pg_dsn) as dsn, _redis(stores, redis_setup) as redis:
        found = asyncio.run(
            explore(
                dsn,
                run.actors,
                run.schema,
                run.check,
                max_orders=asked.max_orders,
                first=asked.first or asked.spec is not None,
                all_orders=asked.all_orders,
                exhaustive=asked.exhaustive,
                seed=asked.seed,
                deadlock_timeout_ms=run.deadlock_ms,
                cwd=Path.cwd(),
                redis=redis,
                invariant_cmd=stores.invariant_cmd or "",
            )
        )
        if asked.spec is not None and found.broke and found.broke[0].run.redis_steps:
            schedule = ",".join(str(a) for a in found.broke[0].run.schedule)
            raise LabError(
                f"--spec {asked.spec}: the first broken order has Redis steps and an isolation "
                f"spec holds SQL only; `trace --schedule {schedule}` with the same actors runs it"
            )
        if asked.spec is not None and found.broke:
            exported = asyncio.run(
                export(found.broke[0], run.schema, run.check, dsn, run.deadlock_ms)
            )
            asked.spec.write_text(exported.text, encoding="utf-8")
            asked.spec.with_suffix(".out").write_text(exported.output, encoding="utf-8")
    if asked.as_json:
        data = found.as_json()
        if exported is not None:
            data["spec"] = {
                "path": str(asked.spec),
                "steps": exported.steps,
                "dropped": exported.dropped,
                "shrunk": exported.shrunk,
            }
        sys.stdout.write(json.dumps(data) + "\n")
        return
    print_exploration(out(), found)
    if asked.spec is not None:
        _say_spec(asked.spec, exported)


def _say_spec(spec: Path, exported: Exported | None) -> None:
    """One line: where the spec went and how small it is, or that none was written."""
    if exported is None:
        out().print(f"no broken order: no spec written to {spec}", markup=False)
        return
    how = (
        f"{exported.dropped} dropped by shrinking, none more can be"
        if exported.shrunk
        else "the whole order: a broken invariant is not shrunk"
    )
    out().print(
        f"spec: {spec} ({exported.steps} steps, {how}); the tester's output: "
        f"{spec.with_suffix('.out')}; `locklab trace {spec}` runs it again",
        markup=False,
    )


def trace_actors(
    commands: list[str],
    setup: Path | None,
    invariant: Path | None,
    schedule: str | None,
    pg_dsn: str | None,
    deadlock_ms: int | None,
    stores: Stores = Stores(),
) -> None:
    """`locklab trace --actor ... --schedule 1,2,1,2`: one order, as a transcript."""
    run = gated(commands, setup, invariant, deadlock_ms)
    redis_setup = stores.check(run.actors)
    if schedule is None:
        raise LabError("trace --actor needs --schedule: the actor of each statement, e.g. 1,2,1,2")
    order_of = schedule_of(schedule, run.actors)
    with _postgres(pg_dsn) as dsn, _redis(stores, redis_setup) as redis:
        order = asyncio.run(
            trace(
                dsn,
                run.actors,
                run.schema,
                run.check,
                order_of,
                deadlock_timeout_ms=run.deadlock_ms,
                cwd=Path.cwd(),
                redis=redis,
                invariant_cmd=stores.invariant_cmd or "",
            )
        )
    print_order(out(), order, run.actors)
