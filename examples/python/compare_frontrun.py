"""frontrun 0.7 and the lab on the same four bugs, the same code: each bug is a psycopg 3
program of this folder, run by `locklab explore --actor` as two commands and by frontrun
as two calls of its `main(dsn)` (frontrun_side.py). Prints a markdown table: found or
not, orders (frontrun: executions) to the first failure, seconds to it, a full run, and
what each prints.

    make compare-frontrun                 # or, from the repository's root:
    .venv/bin/python examples/python/compare_frontrun.py [--pg-dsn DSN] [--only deadlock]

frontrun is installed from the package index into a throwaway venv in a temporary folder
(`--frontrun-venv DIR` makes or reuses one there instead), never into the project's: it is
no dependency of the lab. Both sides run on one PostgreSQL: --pg-dsn's, or an embedded
one started here and stopped at the end, with deadlock_timeout 100 ms on every database
either side explores (the lab's default for explore). Seconds are wall time of the whole
command, interpreter start included; frontrun's time inside `explore()` is in brackets.
Where frontrun stops with its NondeterministicSQLError (an INSERT whose new id it could not
capture), the bug is run by frontrun again with the option that error names,
warn_nondeterministic_sql=False, as a row of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
FRONTRUN = "frontrun[sql]==0.7.0"  # the sql extra: sqlglot, its SQL parser for row-level conflicts
TIMEOUT = 900  # seconds, per command
DEADLOCK_TIMEOUT_MS = 100  # as `locklab explore` sets on each order's database


@dataclass(frozen=True)
class Call:
    """One actor: an example's command-line arguments and the same as main()'s keywords."""

    module: str
    argv: tuple[str, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def command(self, *options: str) -> str:
        return " ".join([sys.executable, f"{self.module}.py", *options, *self.argv])

    def worker(self) -> str:
        return json.dumps([self.module, dict(self.kwargs)])


@dataclass(frozen=True)
class Bug:
    name: str
    setup: str
    invariant: str
    actors: tuple[Call, Call]
    fix: tuple[str, str] = ("", "")  # the programs' flag of the fix, and main()'s keyword

    @property
    def slug(self) -> str:
        return self.name.split()[-1].replace("-", "_").lower()

    def fixed(self) -> Bug:
        """The same bug with each program's fix on (`--fixed`)."""
        flag, keyword = self.fix
        actors = tuple(
            replace(a, argv=(flag, *a.argv), kwargs=(*a.kwargs, (keyword, True)))
            for a in self.actors
        )
        return replace(self, name=f"{self.name}, {flag}", actors=actors)  # type: ignore[arg-type]


BUGS = (
    Bug(
        "lost update",
        "setup.sql",
        "deposits-kept.sql",
        (Call("lost_update_psycopg"),) * 2,
        ("--locked", "locked"),
    ),
    Bug(
        "deadlock",
        "transfer-setup.sql",
        "transfers-kept.sql",
        (
            Call("deadlock_psycopg", ("1", "2"), (("source", 1), ("target", 2))),
            Call("deadlock_psycopg", ("2", "1"), (("source", 2), ("target", 1))),
        ),
        ("--sorted", "ordered"),
    ),
    Bug(
        "phantom overbooking",
        "booking-setup.sql",
        "booking-kept.sql",
        (
            Call("overbooking_psycopg", ("ann",), (("guest", "ann"),)),
            Call("overbooking_psycopg", ("bob",), (("guest", "bob"),)),
        ),
        ("--locked", "locked"),
    ),
    Bug(
        "SELECT-then-INSERT upsert",
        "upsert-setup.sql",
        "upsert-kept.sql",
        (Call("upsert_psycopg"),) * 2,
        ("--on-conflict", "on_conflict"),
    ),
)


def timed(command: list[str], env: dict[str, str] | None = None) -> tuple[dict[str, Any], float]:
    """Run `command` from this folder; its last stdout line as JSON, and the wall seconds."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=HERE, env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return {"error": f"no answer in {TIMEOUT} s"}, time.monotonic() - started
    seconds = time.monotonic() - started
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]), seconds
    except (IndexError, json.JSONDecodeError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {done.returncode}: {tail}"}, seconds


def lab(dsn: str, bug: Bug, first: bool) -> dict[str, Any]:
    """`locklab explore --actor A --actor B --json` (with --first) on this bug."""
    command = [sys.executable, "-m", "lab.cli", "explore", "--json"]
    for actor in bug.actors:
        command += ["--actor", actor.command()]
    command += ["--setup", bug.setup, "--invariant", bug.invariant] + (["--first"] if first else [])
    data, seconds = timed(command, {**os.environ, "LOCKLAB_PG_DSN": dsn})
    if "error" in data:
        return {**data, "seconds": seconds}
    broken = data["first_broken"]
    sees = f"every order kept: `{', '.join(data['outcomes'])}`"
    if broken is not None:
        steps = [line for line in broken["transcript"] if line.startswith("step ")]
        broke = [outcome for outcome in data["outcomes"] if outcome.startswith("broke")]
        ends = f"invariant: {broken['invariant']}; {broke[0] if len(broke) == 1 else 'broke'}"
        sees = f"the order's {len(steps)} steps, values bound, then `{ends}`"
    return {
        "found": data["broke"] > 0,
        "orders": data["orders"],
        "broke": data["broke"],
        "complete": data["complete"],
        "seconds": seconds,
        "sees": sees,
        "json": data,
    }


def frontrun_venv(where: Path | None) -> Path:
    """A venv with frontrun and the project's psycopg, made in `where` (a new temporary
    folder when None); `where` kept as it is when it has frontrun already."""
    folder = where or Path(tempfile.mkdtemp(prefix="frontrun-venv-"))
    python = folder / "bin" / "python"
    if (folder / "bin" / "frontrun").exists():
        return folder
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    psycopg_pin = f"psycopg[binary]=={version('psycopg')}"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, FRONTRUN, psycopg_pin], check=True)
    return folder


def frontrun_database(dsn: str, bug: Bug) -> str:
    """A database of frontrun's own for this bug, made anew; its DSN."""
    from lab.servers.base import with_database

    name = f"frontrun_{bug.slug}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
        ms = DEADLOCK_TIMEOUT_MS
        conn.execute(f"ALTER DATABASE \"{name}\" SET deadlock_timeout = '{ms}ms'".encode())
    return with_database(dsn, name)


def frontrun(venv: Path, dsn: str, bug: Bug, first: bool, *options: str) -> dict[str, Any]:
    """frontrun_side.py under frontrun's CLI, on a database of its own."""
    database = frontrun_database(dsn, bug)
    bin_ = venv / "bin"
    command = [str(bin_ / "frontrun"), str(bin_ / "python"), "frontrun_side.py", "--dsn", database]
    command += ["--setup", bug.setup, "--invariant", bug.invariant]
    for actor in bug.actors:
        command += ["--worker", actor.worker()]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    data, seconds = timed(command + (["--first"] if first else []) + list(options), env)
    if "error" in data or "raised" in data:
        said = (data.get("error") or f"raised {data['raised']}").splitlines()
        return {**data, "wall": seconds, "sees": said[0]}
    lines = [line.strip() for line in (data["explanation"] or "").splitlines() if line.strip()]
    return {
        "found": data["property_holds"] is False,
        "orders": data["executions"],
        "broke": len(data["failures"]),
        "seconds": seconds,
        "inside": data["seconds"],
        "sees": " / ".join(lines[:2]) or (data["inconclusive"] or "nothing: the property held"),
        "json": data,
    }


def cell_first(run: dict[str, Any]) -> tuple[str, str, str]:
    """found, orders to the first failure, seconds to it."""
    if "error" in run or "raised" in run:
        return "error", "-", f"{run.get('wall', run.get('seconds', 0)):.1f}"
    inside = f" ({run['inside']:.1f})" if "inside" in run else ""
    return ("yes" if run["found"] else "no"), str(run["orders"]), f"{run['seconds']:.1f}{inside}"


def cell_full(run: dict[str, Any] | None) -> str:
    if run is None:
        return "not run"
    if "error" in run or "raised" in run:
        return (run.get("error") or f"raised {run['raised']}").splitlines()[0]
    whole = "" if run.get("complete", True) else ", stopped early"
    inside = f" ({run['inside']:.1f})" if "inside" in run else ""
    return f"{run['orders']}, broke in {run['broke']}, {run['seconds']:.1f} s{inside}{whole}"


def sees(run: dict[str, Any]) -> str:
    text = run.get("sees") or run.get("error") or f"raised {run.get('raised')}"
    return text.replace("|", "\\|")


def table(rows: list[tuple[Bug, str, dict[str, Any], dict[str, Any] | None]]) -> list[str]:
    out = [
        "| bug | tool | found | orders to the first failure | seconds to it | full run: orders, "
        "broken, seconds | what the user sees (first failure) |",
        "|---|---|---|---|---|---|---|",
    ]
    for bug, tool, first, full in rows:
        found, orders, seconds = cell_first(first)
        out.append(
            f"| {bug.name} | {tool} | {found} | {orders} | {seconds} | {cell_full(full)} | {sees(first)} |"
        )
    return out


NO_SQL_CHECK = (
    "frontrun, warn_nondeterministic_sql=False"  # what its NondeterministicSQLError advises
)


def measure(tool: str, venv: Path, dsn: str, bug: Bug, first: bool) -> dict[str, Any]:
    if tool == "locklab":
        return lab(dsn, bug, first)
    return frontrun(venv, dsn, bug, first, *(["--no-sql-check"] if tool == NO_SQL_CHECK else []))


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def servers(pg_dsn: str | None) -> Any:
    from lab.servers import open_servers

    return open_servers(pg_dsn, None, need_redis=False, mode=None if pg_dsn else "embedded")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-dsn", default=os.environ.get("LOCKLAB_PG_DSN"))
    parser.add_argument("--only", action="append", help="a bug by its last word: update, ...")
    parser.add_argument("--no-full", action="store_true", help="only the runs to the first failure")
    parser.add_argument("--fixed", action="store_true", help="each program's fix on, not the bug")
    parser.add_argument("--frontrun-venv", type=Path, help="make or reuse frontrun's venv here")
    parser.add_argument("--json-out", type=Path, help="every run's data, as JSON, to this file")
    args = parser.parse_args()
    unknown = sorted(set(args.only or ()) - {b.slug for b in BUGS})
    if unknown:
        parser.error(f"unknown bug {', '.join(unknown)}: one of {', '.join(b.slug for b in BUGS)}")
    bugs = [b for b in BUGS if not args.only or b.slug in args.only]
    bugs = [b.fixed() for b in bugs] if args.fixed else bugs
    made = args.frontrun_venv is None
    venv = frontrun_venv(args.frontrun_venv)
    before = load()
    rows: list[tuple[Bug, str, dict[str, Any], dict[str, Any] | None]] = []
    try:
        with servers(args.pg_dsn) as srv:
            dsn = srv.pg.dsn
            for bug in bugs:
                tools = ["locklab", "frontrun 0.7.0"]
                while tools:
                    tool = tools.pop(0)
                    first = measure(tool, venv, dsn, bug, True)
                    if "NondeterministicSQLError" in first.get("raised", ""):
                        tools.append(NO_SQL_CHECK)
                    full = None if args.no_full else measure(tool, venv, dsn, bug, False)
                    rows.append((bug, tool, first, full))
                    line = f"{bug.name}, {tool}: {cell_first(first)}; full: {cell_full(full)}"
                    print(line, file=sys.stderr)
    finally:
        if made:
            shutil.rmtree(venv, ignore_errors=True)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"Measured {when}; load average {before} before, {load()} after; psycopg {version('psycopg')}."
    )
    print()
    print("\n".join(table(rows)))
    if args.json_out:
        data = [{"bug": b.name, "tool": t, "first": f, "full": u} for b, t, f, u in rows]
        args.json_out.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the servers and the venv are gone by now (finally, with)
        sys.exit("compare-frontrun: interrupted; nothing measured was printed")
