"""The Typer app, its console and the one guard every command runs in: bad input and
failures end as one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, TypeVar

import asyncpg
import typer
from rich.console import Console

from lab.errors import LabError, ScenarioFailure
from lab.servers.faults import ServerFault

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


# soft_wrap: a line longer than the terminal is left for the terminal to fold, not broken
# by rich, so a path or a command copied from it is whole (tables still fit the width).
def out() -> Console:
    return Console(highlight=False, soft_wrap=True)


def err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


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
    from lab.procs.lifecycle import sweep_orphans
    from lab.procs.trust import warn

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


def _tables() -> Console:
    """stdout for tables: piped into a file or a program it gets 160 columns, not 80."""
    console = out()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(highlight=False, width=160, soft_wrap=True)
    return console


def _show_version(value: bool) -> None:
    """--version: what a run would record, then exit (before any command is parsed)."""
    if not value:
        return
    from lab.output.provenance import version_lines

    console = out()
    for line in guarded(version_lines):
        console.print(line, markup=False)
    raise typer.Exit()


def _servers_mode(value: str | None) -> str | None:
    from lab.servers import MODES

    if value is not None:
        if value not in MODES:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(MODES)}")
        os.environ["LOCKLAB_SERVERS"] = value  # read by lab.servers.open_servers()
    return value


@app.callback()
def _options(
    results_dir: Annotated[
        str | None,
        typer.Option(
            "--results-dir",
            help="Where records go (default ./results of the current folder; env LOCKLAB_RESULTS).",
        ),
    ] = None,
    servers: Annotated[
        str | None,
        typer.Option(
            "--servers",
            help="Where servers come from: auto (a DSN given, kept ones, else the lab's own "
            "embedded ones) | embedded | docker (only when asked) | external; env "
            "LOCKLAB_SERVERS.",
            callback=_servers_mode,
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="The lab's version and commit, the servers it would use and the client "
            "libraries' versions, as every record carries them.",
            callback=_show_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Reproduce concurrency bugs and their fixes against real PostgreSQL and Redis."""
    if results_dir:
        os.environ["LOCKLAB_RESULTS"] = results_dir  # read by lab.core.results.results_root()
