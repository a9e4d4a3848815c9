"""`locklab gate`: a PostgreSQL proxy on loopback whose statements can be logged (and,
under trace and explore, held)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Annotated, Any, TextIO

import typer

from lab.cli.base import app, guarded, out
from lab.cli.options import PgDsn, RedisUrl
from lab.errors import LabError


@app.command("gate")
def gate_cmd(
    port: Annotated[
        int, typer.Option(help="The port on 127.0.0.1 to listen on (0: a free one).")
    ] = 0,
    pg_dsn: PgDsn = None,
    log: Annotated[
        Path | None,
        typer.Option(help="Write each session's statements to FILE as they pass ('-': stdout)."),
    ] = None,
    redis: Annotated[
        bool,
        typer.Option(
            "--redis", help="Also a Redis gate (in front of the lab's Redis, or --redis-url)."
        ),
    ] = False,
    redis_url: RedisUrl = None,
    redis_port: Annotated[
        int, typer.Option(help="With --redis: the Redis gate's port on 127.0.0.1 (0: free).")
    ] = 0,
) -> None:
    """Serve a gate in front of PostgreSQL (the lab's own, or --pg-dsn) until Ctrl-C: point
    an application or its tests at it and read its statements, session by session. With
    --redis, a Redis gate beside it: its commands are logged too (r1, r2...)."""

    def body() -> None:
        from lab.gate.serve import serve
        from lab.servers import open_servers

        for name, number in (("--port", port), ("--redis-port", redis_port)):
            if not 0 <= number <= 65535:
                raise LabError(f"{name} {number}: not a TCP port")
        want_redis = redis or redis_url is not None
        console = out()

        def say(line: str) -> None:
            console.print(line, markup=False)

        with (
            open_servers(pg_dsn, redis_url, need_redis=want_redis) as servers,
            _log_to(log) as sink,
        ):
            assert servers.pg is not None
            for note in servers.notes:
                say(note)
            upstream = (servers.redis.url, redis_port) if servers.redis is not None else None
            _loop_runner()(serve(servers.pg.dsn, port, sink, say, upstream))

    guarded(body)


def _loop_runner() -> Callable[[Coroutine[Any, Any, None]], None]:
    """uvloop's when it is installed (a relay spends its time in the loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


@contextlib.contextmanager
def _log_to(path: Path | None) -> Iterator[TextIO | None]:
    if path is None:
        yield None
    elif str(path) == "-":
        yield sys.stdout
    else:
        with path.open("a", encoding="utf-8", buffering=1) as sink:
            yield sink
