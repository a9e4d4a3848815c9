"""The lab against reference tools on the same server: bench."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from lab.cli.base import app, err, guarded, out
from lab.cli.options import NoRecord, PgDsn, Procs, RedisClient, RedisUrl, parse_procs
from lab.core.knobs import parse_redis_client
from lab.core.results import results_root
from lab.errors import LabError
from lab.output import console as report
from lab.servers import open_servers


@app.command()
def bench(
    what: Annotated[
        str,
        typer.Argument(
            help="checkout (against pgbench) | redis (against redis-benchmark) | isolation "
            "(a spec folder, --specs, against pg_isolation_regress) | gate (pgbench direct, "
            "through PgBouncer and through locklab gate)."
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
    seconds: Annotated[int, typer.Option(help="gate: seconds of each pgbench run.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON only.")] = False,
    no_record: NoRecord = False,
) -> None:
    """The lab against a reference tool on the same server: pgbench (checkout),
    redis-benchmark (redis) or pg_isolation_regress (isolation); both sides, the ratio,
    and a record."""
    args = _BenchArgs(
        what=what,
        n=n,
        rounds=rounds,
        scale=scale,
        procs=procs,
        redis_client=redis_client,
        pg_dsn=pg_dsn,
        redis_url=redis_url,
        specs=specs,
        lanes=lanes,
        seconds=seconds,
    )

    def body() -> None:
        from lab.core.results import new_run_id

        _check(args)
        run_id = new_run_id()
        name, data = _measure(args, run_id.replace("-", "")[-8:])
        if not no_record:  # beside run records, in a subfolder: not a scenario run
            _record(results_root() / run_id / "bench" / name, data)
        if as_json:
            sys.stdout.write(json.dumps(data, default=str) + "\n")
            return
        from lab.output import bench as bench_report

        bench_report.print_bench(out(), what, scale, data)

    guarded(body)


@dataclass(frozen=True)
class _BenchArgs:
    """What `locklab bench` was asked to measure, as given on the command line."""

    what: str
    n: int | None
    rounds: int
    scale: bool
    procs: str | None
    redis_client: str | None
    pg_dsn: str | None
    redis_url: str | None
    specs: Path | None
    lanes: int
    seconds: int


def _check(a: _BenchArgs) -> None:
    """Bad or clashing options, each a `LabError` before any server starts."""
    if a.what not in ("checkout", "redis", "isolation", "gate"):
        raise LabError(f"bench {a.what!r}: expected checkout, redis, isolation or gate")
    if a.seconds < 1:
        raise LabError(f"bench --seconds {a.seconds}: must be at least 1")
    if (a.what == "isolation") != (a.specs is not None):
        raise LabError("bench: --specs DIR goes with isolation, and isolation needs it")
    if (a.n is not None and a.n < 1) or a.rounds < 1:
        raise LabError("bench: -n and --rounds must be at least 1")
    if a.scale and (a.what != "checkout" or a.n is not None):
        raise LabError("bench --scale: the checkout curve has its own n; drop -n / redis")


def _measure(a: _BenchArgs, run_id: str) -> tuple[str, dict[str, Any]]:
    """The bench asked for, run: its record's file name and its data."""
    if a.what == "gate":
        return "gate.json", _bench_gate(a.seconds, a.rounds, a.pg_dsn)
    if a.what == "isolation":
        assert a.specs is not None
        return "isolation.json", _bench_isolation(a.specs, a.lanes, a.pg_dsn)
    if a.what == "redis":
        from lab.load.bench import REDIS_SIZES

        sizes = (a.n,) if a.n else REDIS_SIZES
        return "redis.json", _bench_redis(run_id, sizes, a.procs, a.redis_client, a.redis_url)
    if a.scale:
        return "scale.json", _bench_scale(run_id, a.rounds, a.pg_dsn)
    return "result.json", _bench_checkout(run_id, a.n or 200, a.rounds, a.pg_dsn)


def _record(path: Path, data: dict[str, Any]) -> None:
    """Write the bench's data with the commit and the lab's provenance, and say where."""
    from lab.core.provenance import lab_info
    from lab.core.results import git_commit, write_json

    write_json(path, {**data, "git_commit": git_commit(), "lab": lab_info()})
    err().print(f"[dim]record: {path}[/dim]")


def _bench_checkout(run_id: str, n: int, rounds: int, pg_dsn: str | None) -> dict[str, Any]:
    from lab.load.bench import run_bench

    with open_servers(pg_dsn, None, need_redis=False) as srv:
        report.servers(err(), srv.infos(), srv.notes)
        with err().status(f"bench: {rounds} rounds of {n} clients ..."):
            res = asyncio.run(run_bench(srv, n, rounds, run_id))
        return {**res.to_json(), "servers": {i.product: i.to_json() for i in srv.infos()}}


def _bench_gate(seconds: int, rounds: int, pg_dsn: str | None) -> dict[str, Any]:
    from lab.gate.bench import run_gate_bench

    with open_servers(pg_dsn, None, need_redis=False) as srv:
        report.servers(err(), srv.infos(), srv.notes)
        with err().status("bench gate ...") as status:
            res = asyncio.run(run_gate_bench(srv, seconds, rounds, status.update))
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
    from lab.load.bench import SCALE_NS, run_scale
    from lab.servers.pgbouncer import find_pgbouncer

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
    from lab.load.bench import run_redis_bench

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
