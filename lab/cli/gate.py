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
from lab.cli.options import PgDsn
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
) -> None:
    """Serve a gate in front of PostgreSQL (the lab's own, or --pg-dsn) until Ctrl-C: point
    an application or its tests at it and read its statements, session by session."""

    def body() -> None:
        from lab.gate.serve import serve
        from lab.servers import open_servers

        if not 0 <= port <= 65535:
            raise LabError(f"--port {port}: not a TCP port")
        console = out()

        def say(line: str) -> None:
            console.print(line, markup=False)

        with open_servers(pg_dsn, need_redis=False) as servers, _log_to(log) as sink:
            assert servers.pg is not None
            for note in servers.notes:
                say(note)
            _loop_runner()(serve(servers.pg.dsn, port, sink, say))

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
