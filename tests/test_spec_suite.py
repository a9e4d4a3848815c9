"""`locklab spec-suite DIR`: a folder laid out like src/test/isolation, every spec run in
lanes and compared with its expected output; a table, the diffs kept, exit 1 on a
difference; specs the server cannot run skipped for a named reason; bad input one line."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from lab.servers import Servers
from lab.spec.suite import (
    NEEDS_DEBUG_BUILD,
    NEEDS_EXTENSION,
    NEEDS_INJECTION_POINT,
    runs_alone,
    skip_reason,
    suite_names,
)
from lab.spec.wire import PgConn
from tests.test_cli import ROOT, assert_one_line_error, interruptible, locklab
from tests.test_spec import limits

SUITE = ROOT / "tests" / "data" / "isolation"
QUICK = limits(1)  # the specs that wait for the limit wait 2 s
ROLE_SPEC = """setup { CREATE ROLE regress_suite_role; CREATE TABLE t (i int); }
teardown { DROP TABLE t; DROP ROLE regress_suite_role; }
session s1
step s1a { SELECT count(*) FROM pg_roles WHERE rolname = 'regress_suite_role'; }
"""
ROLE_OUT = """Parsed test spec with 1 sessions

starting permutation: s1a
step s1a: SELECT count(*) FROM pg_roles WHERE rolname = 'regress_suite_role';
count
-----
    1
(1 row)

"""


def _folder(tmp_path: Path) -> Path:
    """The project's own specs, plus one needing a missing extension and one that makes
    a role (runs alone); one expected file changed so that its spec differs."""
    folder = tmp_path / "isolation"
    shutil.copytree(SUITE, folder)
    (folder / "specs" / "needs-ext.spec").write_text(
        "setup { CREATE EXTENSION no_such_extension; }\nsession s1\nstep s1a { SELECT 1; }\n"
    )
    (folder / "specs" / "role.spec").write_text(ROLE_SPEC)
    (folder / "expected" / "role.out").write_text(ROLE_OUT)
    nowait = folder / "expected" / "nowait.out"
    nowait.write_text(nowait.read_text().replace("(1 row)", "(2 rows)", 1))
    return folder


def test_the_suite_runs_every_spec_and_keeps_the_diffs(servers: Servers, tmp_path: Path) -> None:
    """spec-suite runs every spec, exits 1 when one differs, and keeps outputs and diffs."""
    assert servers.pg is not None
    folder, results = _folder(tmp_path), tmp_path / "results"
    proc = locklab(
        "spec-suite", str(folder), "--pg-dsn", servers.pg.dsn, results=results, env=QUICK
    )
    assert proc.returncode == 1, proc.stderr  # nowait differs
    assert "Traceback" not in proc.stderr
    names = sorted(p.stem for p in (folder / "specs").glob("*.spec"))
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith(f"{len(names)} specs: {len(names) - 2} identical, 1 differ, 1 skip")
    assert "needs-ext" in proc.stdout and NEEDS_EXTENSION in proc.stdout
    (record,) = results.rglob("spec-suite/suite.json")
    data = json.loads(record.read_text())
    status = {s["name"]: s for s in data["specs"]}
    assert [s["name"] for s in data["specs"]] == names  # no schedule: every spec, by name
    assert status["nowait"]["status"] == "differs"
    assert status["needs-ext"] == {**status["needs-ext"], "status": "skipped"}
    assert status["role"]["status"] == "identical" and status["role"]["alone"]
    diff = (record.parent / "nowait.diff").read_text()
    assert "-(2 rows)" in diff and "+(1 row)" in diff
    assert (record.parent / "mutual-blockers.out").read_text() == (
        SUITE / "expected" / "mutual-blockers.out"
    ).read_text()  # the tester's exit(1) is part of what it printed, not a difference


def test_a_schedule_says_which_specs_and_in_what_order(servers: Servers, tmp_path: Path) -> None:
    """An isolation_schedule file names the specs the suite runs, in its order."""
    assert servers.pg is not None
    folder = _folder(tmp_path)
    (folder / "isolation_schedule").write_text("# two\ntest: write-skew\ntest: deadlock-soft\n")
    assert suite_names(folder) == ["write-skew", "deadlock-soft"]
    proc = locklab(
        "spec-suite",
        str(folder),
        "--pg-dsn",
        servers.pg.dsn,
        "--json",
        "--lanes",
        "2",
        results=tmp_path / "results",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [s["name"] for s in data["specs"]] == ["write-skew", "deadlock-soft"]
    assert data["counts"] == {"identical": 2, "differs": 0, "skipped": 0}


@pytest.mark.parametrize(
    ("setup", "pattern"),
    [
        ("", r"no specs/ folder"),
        ("schedule", r"isolation_schedule: no specs/missing\.spec"),
        ("bad", r"bad\.spec:3: .*s9z"),
    ],
)
def test_bad_folders_are_one_line(tmp_path: Path, setup: str, pattern: str) -> None:
    """A folder without specs, expected outputs or a readable schedule is one line, exit 2."""
    folder = tmp_path / "suite"
    folder.mkdir()
    if setup:
        (folder / "specs").mkdir()
        (folder / "specs" / "ok.spec").write_text("session s1\nstep s1a { SELECT 1; }\n")
    if setup == "schedule":
        (folder / "isolation_schedule").write_text("test: ok missing\n")
    if setup == "bad":
        (folder / "specs" / "bad.spec").write_text(
            "session s1\nstep s1a { SELECT 1; }\npermutation s1a s9z\n"
        )
    proc = locklab("spec-suite", str(folder), results=tmp_path / "results")
    assert proc.returncode == 2
    assert_one_line_error(proc, pattern, tmp_path / "results")


def test_skip_reasons_come_from_a_fixed_list() -> None:
    """A spec is skipped only for a reason from a fixed list (extension, injection point)."""
    have = {"plpgsql", "pageinspect"}
    assert skip_reason("CREATE EXTENSION pageinspect;", have, False) == ""
    assert skip_reason("create extension if not exists amcheck;", have, False) == (
        f"{NEEDS_EXTENSION} (amcheck)"
    )
    assert skip_reason("CREATE EXTENSION injection_points;", have, False) == NEEDS_INJECTION_POINT
    assert skip_reason("SET debug_discard_caches = 1;", have, False) == NEEDS_DEBUG_BUILD
    assert skip_reason("SET debug_discard_caches = 1;", have, True) == ""
    assert runs_alone("GRANT TEMP ON DATABASE isolation_regression TO r")
    assert runs_alone("CREATE ROLE regress_r")
    assert not runs_alone("CREATE TABLE roles (i int)")


def test_ctrl_c_mid_step_ends_the_suite_at_once(servers: Servers, tmp_path: Path) -> None:
    """SIGINT while a lane's step sleeps on the server: the suite ends within seconds (not
    at the step's limit), exit 130, one line, and its lanes' databases are gone."""
    assert servers.pg is not None
    folder = tmp_path / "isolation"
    (folder / "specs").mkdir(parents=True)
    (folder / "specs" / "sleeps.spec").write_text(
        "session s1\nstep s1sleep { SELECT pg_sleep(60); }\n"
    )
    admin = PgConn(servers.pg.dsn)
    asleep = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname LIKE 'locklab_suite_%' AND query LIKE 'SELECT pg_sleep(60)%'"
    )
    try:
        with interruptible(tmp_path, "spec-suite", str(folder), "--pg-dsn", servers.pg.dsn) as (
            _,
            errfile,
        ):
            for _ in range(600):  # until the server shows the step running
                res = admin.execute(asleep)
                if res is not None and res.rows and res.rows[0][0] == "1":
                    break
                time.sleep(0.05)
            else:
                pytest.fail(f"the step never started: {errfile.read_text()}")
            t0 = time.monotonic()
        assert time.monotonic() - t0 < 10
        stderr = errfile.read_text()
        assert "Traceback" not in stderr, stderr
        assert stderr.strip().splitlines()[-1].startswith("locklab: interrupted")
        res = admin.execute("SELECT count(*) FROM pg_database WHERE datname LIKE 'locklab_suite_%'")
        assert res is not None and res.rows == [["0"]]
    finally:
        admin.close()
