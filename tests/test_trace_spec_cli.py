"""`locklab trace FILE.spec` from the command line: stdout is the isolation tester's text
and nothing else, `--expected` diffs it (alternates count), a bad spec is one line."""

from __future__ import annotations

import json
from pathlib import Path

from lab.servers import Servers
from tests.test_cli import ROOT, assert_one_line_error, locklab

SPECS, EXPECTED = ROOT / "tests/data/isolation/specs", ROOT / "tests/data/isolation/expected"


def test_trace_spec_prints_the_testers_text_and_diffs_it(servers: Servers, tmp_path: Path) -> None:
    """trace FILE.spec prints the tester's text on stdout and --expected diffs it."""
    assert servers.pg is not None
    spec, want = SPECS / "deadlock-simple.spec", EXPECTED / "deadlock-simple.out"
    dsn = ("--pg-dsn", servers.pg.dsn)
    same = locklab("trace", str(spec), "--expected", str(want), *dsn, results=tmp_path)
    assert same.returncode == 0, same.stderr
    assert same.stdout == want.read_text()  # stdout: the tester's text, nothing else
    assert f"identical to {want}" in same.stderr
    wrong = tmp_path / "deadlock-simple.out"  # the expected file with one line changed ...
    wrong.write_text(want.read_text().replace("ERROR:  deadlock detected", "ERROR:  other"))
    differs = locklab("trace", str(spec), "--expected", str(wrong), *dsn, results=tmp_path)
    assert differs.returncode == 1 and "-ERROR:  other" in differs.stderr
    assert "+ERROR:  deadlock detected" in differs.stderr
    (tmp_path / "deadlock-simple_1.out").write_text(want.read_text())  # ... an alternate
    alternate = locklab("trace", str(spec), "--expected", str(wrong), *dsn, results=tmp_path)
    assert alternate.returncode == 0, alternate.stderr


def test_a_bad_spec_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    """A spec naming an unknown step is one line naming the file and line, exit 2."""
    bad = tmp_path / "bad.spec"
    bad.write_text("session s1\nstep s1a { SELECT 1; }\npermutation s1a s9z\n")
    proc = locklab("trace", str(bad), results=tmp_path)
    assert proc.returncode == 2
    assert_one_line_error(proc, rf"{bad}:\d+", tmp_path)


def test_options_that_do_not_apply_are_refused(tmp_path: Path) -> None:
    """A spec names its own sessions and steps: --svg or --schedule on one is refused, and
    --expected on a scenario; one line each, exit 2, before any server starts."""
    spec = str(SPECS / "deadlock-simple.spec")
    svg = locklab("trace", spec, "--svg", str(tmp_path / "x.svg"), results=tmp_path)
    assert svg.returncode == 2
    assert_one_line_error(svg, r"--svg: not for an isolation spec", tmp_path)
    wrong = locklab("trace", "checkout-deadlock", "--expected", spec, results=tmp_path)
    assert wrong.returncode == 2
    assert_one_line_error(wrong, r"--expected diffs an isolation spec's output", tmp_path)


def test_steps_that_never_return_are_named_with_their_line(
    servers: Servers, tmp_path: Path
) -> None:
    """The tester gives up (mutually blocked steps): stdout is still its text, and one
    line names the file, the line and the steps; exit 2."""
    from tests.test_spec import limits

    assert servers.pg is not None
    spec = SPECS / "mutual-blockers.spec"
    proc = locklab("trace", str(spec), "--pg-dsn", servers.pg.dsn, results=tmp_path, env=limits(1))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == (EXPECTED / "mutual-blockers.out").read_text()
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"locklab: {spec}:16: steps b, a2 block each other and never return", last


def test_trace_takes_a_scenarios_parameters_and_records_them(
    servers: Servers, tmp_path: Path
) -> None:
    """`trace SCENARIO -p key=value` runs the schedule with it (lost-update with 2 in stock:
    both reads see 2) and the record keeps it; -p isolation, an unknown key, -p with
    --actor or on a spec are one line each, before any server starts."""
    assert servers.pg is not None
    dsn = ("--pg-dsn", servers.pg.dsn)
    args = ("trace", "lost-update", "-v", "buggy", "--schedule", "both-read-first")
    ran = locklab(*args, "-p", "stock=2", *dsn, results=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.count("stock=2") == 2
    (record,) = tmp_path.rglob("lost-update.json")
    assert json.loads(record.read_text())["params"] == {"stock": 2}
    refused = tmp_path / "refused"
    for extra, said in (
        (("-p", "isolation=serializable"), r"give the levels with --isolation"),
        (("-p", "nope=1"), r"--param 'nope=1': lost-update takes key=value"),
    ):
        proc = locklab(*args, *extra, results=refused)
        assert_one_line_error(proc, said, refused)
    actors = locklab("explore", "--actor", "true", "-p", "stock=2", results=refused)
    assert_one_line_error(actors, r"-p: a scenario's parameter", refused)
    spec = locklab("trace", str(SPECS / "deadlock-simple.spec"), "-p", "a=1", results=refused)
    assert_one_line_error(spec, r"-p: not for an isolation spec", refused)
