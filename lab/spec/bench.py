"""``locklab bench isolation DIR``: the lab's spec runner against PostgreSQL's own,
``pg_isolation_regress``, on the same specs and the same server, in one run: both walls
and their ratio (lab / PostgreSQL's). A benchmark, not a test: the machine may be busy,
so the load average is printed beside the figures.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError
from lab.spec.suite import DBNAME, SCHEDULE, run_suite, suite_names
from lab.spec.wire import parse_dsn

# a passed test as pg_regress prints it: "test NAME ... ok" (15), TAP "ok 3 - NAME" (16+)
_PASSED = re.compile(r"^(?:ok \d+\b|test \S+\s+\.\.\. ok\b)")
TARGET_RATIO = 1.5  # the bound: the lab's suite within 1.5x of PostgreSQL's runner


@dataclass
class Tools:
    regress: Path  # pg_isolation_regress (it runs isolationtester beside it)
    bindir: Path  # where its psql is (it creates its database with psql)
    libdir: str  # its build's libpq, first on LD_LIBRARY_PATH


def find_tools(bindir: Path | None) -> Tools:
    """pg_isolation_regress of the server's own build (beside its pg_config's PGXS)."""
    pg_config = bindir / "pg_config" if bindir is not None else None
    if pg_config is None or not pg_config.is_file():
        found = shutil.which("pg_config")
        if found is None:
            raise LabError("bench isolation: no pg_config to find pg_isolation_regress")
        pg_config = Path(found)
    ask = [str(pg_config), "--pgxs", "--libdir", "--bindir"]
    pgxs, libdir, pg_bindir = subprocess.run(
        ask, capture_output=True, text=True, check=True
    ).stdout.split()
    regress = Path(pgxs).parents[1] / "test" / "isolation" / "pg_isolation_regress"
    if not regress.is_file():
        raise LabError(f"bench isolation: no pg_isolation_regress beside {pgxs}")
    return Tools(regress, Path(pg_bindir), libdir)


def _schedule(folder: Path, names: list[str], scratch: Path) -> Path:
    if (folder / SCHEDULE).is_file():
        return folder / SCHEDULE
    path = scratch / SCHEDULE
    path.write_text("".join(f"test: {n}\n" for n in names))
    return path


def run_pg_regress(folder: Path, dsn: str, tools: Tools, names: list[str]) -> dict[str, object]:
    """pg_isolation_regress over the folder on the server at `dsn` (its own database,
    isolation_regression): wall seconds and its pass count."""
    p = parse_dsn(dsn)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(
        PGHOST=p.get("host", "localhost"),
        PGPORT=p.get("port", "5432"),
        PGUSER=p.get("user", "postgres"),
        PGPASSWORD=p.get("password", ""),
        LD_LIBRARY_PATH=tools.libdir,
    )
    with tempfile.TemporaryDirectory(prefix="locklab-isolation-") as scratch:
        cmd = [
            str(tools.regress),
            f"--inputdir={folder}",
            f"--outputdir={scratch}",
            f"--bindir={tools.bindir}",
            f"--schedule={_schedule(folder, names, Path(scratch))}",
            f"--dbname={DBNAME}",
        ]
        start = time.monotonic()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=scratch)
        wall = time.monotonic() - start
    passed = sum(1 for line in done.stdout.splitlines() if _PASSED.match(line))
    if passed == 0 and done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise LabError(f"pg_isolation_regress failed: {tail[0]}")
    return {"wall_s": round(wall, 3), "passed": passed, "exit_code": done.returncode}


def run_bench(folder: Path, dsn: str, bindir: Path | None, lanes: int) -> dict[str, object]:
    """PostgreSQL's runner, then the lab's, on the same specs and server."""
    names = suite_names(folder)
    tools = find_tools(bindir)
    theirs = run_pg_regress(folder, dsn, tools, names)
    ours = run_suite(folder, dsn, lanes=lanes, names=names)
    ratio = ours.wall_s / float(theirs["wall_s"])  # type: ignore[arg-type]
    return {
        "specs": len(names),
        "pg_isolation_regress": {**theirs, "path": tools.regress.name},
        "lab": {"wall_s": round(ours.wall_s, 3), "lanes": lanes, "counts": ours.counts()},
        "ratio": round(ratio, 3),
        "target_ratio": TARGET_RATIO,
        "loadavg": list(os.getloadavg()),
    }
