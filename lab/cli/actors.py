"""explore and trace with --actor: unchanged programs through the gate."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from lab.cli.base import err, out
from lab.errors import LabError
from lab.gate.explore import explore, trace
from lab.gate.order import Actor
from lab.gate.spec import export
from lab.output import console as report
from lab.output.actors import print_exploration, print_order
from lab.servers import open_servers


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


def schedule_of(text: str, actors: list[Actor]) -> list[int]:
    """'1,2,1,2': the actor of each statement in turn."""
    try:
        schedule = [int(word) for word in text.replace(" ", "").split(",") if word]
    except ValueError:
        raise LabError(f"--schedule {text!r}: actor numbers separated by commas") from None
    unknown = sorted({a for a in schedule if not 1 <= a <= len(actors)})
    if unknown or not schedule:
        raise LabError(f"--schedule {text!r}: actors are numbered 1 to {len(actors)}")
    return schedule


def explore_actors(
    commands: list[str],
    setup: Path | None,
    invariant: Path | None,
    pg_dsn: str | None,
    deadlock_ms: int,
    max_orders: int | None,
    first: bool,
    as_json: bool,
    spec: Path | None = None,
) -> None:
    actors = actors_of(commands)
    if max_orders is not None and max_orders < 1:
        raise LabError(f"--max {max_orders}: must be at least 1")
    if spec is not None and spec.suffix != ".spec":
        raise LabError(f"--spec {spec}: name it FILE.spec (FILE.out is written beside it)")
    check = _read(invariant, "--invariant") or "SELECT true"
    schema = _read(setup, "--setup")
    exported = None
    with open_servers(pg_dsn, None, need_redis=False) as srv:
        assert srv.pg is not None
        report.servers(err(), srv.infos(), srv.notes)
        found = asyncio.run(
            explore(
                srv.pg.dsn,
                actors,
                schema,
                check,
                max_orders=max_orders,
                first=first or spec is not None,
                deadlock_timeout_ms=deadlock_ms,
                cwd=Path.cwd(),
            )
        )
        if spec is not None and found.broke:
            order = found.broke[0]
            exported = asyncio.run(export(order, schema, check, srv.pg.dsn, deadlock_ms))
            spec.write_text(exported.text, encoding="utf-8")
            spec.with_suffix(".out").write_text(exported.output, encoding="utf-8")
    if as_json:
        data = found.as_json()
        if exported is not None:
            data["spec"] = {
                "path": str(spec),
                "steps": exported.steps,
                "dropped": exported.dropped,
                "shrunk": exported.shrunk,
            }
        sys.stdout.write(json.dumps(data) + "\n")
        return
    print_exploration(out(), found)
    if exported is not None and spec is not None:
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
    elif spec is not None:
        out().print(f"no broken order: no spec written to {spec}", markup=False)


def trace_actors(
    commands: list[str],
    setup: Path | None,
    invariant: Path | None,
    schedule: str | None,
    pg_dsn: str | None,
    deadlock_ms: int,
) -> None:
    actors = actors_of(commands)
    if schedule is None:
        raise LabError("trace --actor needs --schedule: the actor of each statement, e.g. 1,2,1,2")
    order_of = schedule_of(schedule, actors)
    check = _read(invariant, "--invariant") or "SELECT true"
    schema = _read(setup, "--setup")
    with open_servers(pg_dsn, None, need_redis=False) as srv:
        assert srv.pg is not None
        report.servers(err(), srv.infos(), srv.notes)
        order = asyncio.run(
            trace(
                srv.pg.dsn,
                actors,
                schema,
                check,
                order_of,
                deadlock_timeout_ms=deadlock_ms,
                cwd=Path.cwd(),
            )
        )
    print_order(out(), order, actors)
