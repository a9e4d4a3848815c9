"""`locklab explore FILE.spec`: every interleaving of a spec's steps at each isolation level
it leaves open, on the lab's sequencer; a step due on a session still waiting makes a
permutation invalid (as the tester before PostgreSQL 14 has it); outcomes by SQLSTATE."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.servers import Servers
from lab.spec.explore import explore_spec, levels_for
from tests.test_cli import assert_one_line_error, locklab

WRITE_SKEW = """# two doctors on call, each goes off call after counting: write skew
setup { CREATE TABLE doctors (name text PRIMARY KEY, on_call bool NOT NULL);
        INSERT INTO doctors VALUES ('alice', true), ('bob', true); }
teardown { DROP TABLE doctors; }
session s1
step r1 { BEGIN; SELECT count(*) FROM doctors WHERE on_call; }
step w1 { UPDATE doctors SET on_call = false WHERE name = 'alice'; }
step c1 { COMMIT; }
session s2
step r2 { BEGIN; SELECT count(*) FROM doctors WHERE on_call; }
step w2 { UPDATE doctors SET on_call = false WHERE name = 'bob'; }
step c2 { COMMIT; }
"""
CROSS = """setup { CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL);
        INSERT INTO acct VALUES (1, 100), (2, 100); }
teardown { DROP TABLE acct; }
session s1
step a1 { BEGIN; UPDATE acct SET bal = bal - 10 WHERE id = 1; }
step b1 { UPDATE acct SET bal = bal + 10 WHERE id = 2; }
step c1 { COMMIT; }
session s2
step a2 { BEGIN; UPDATE acct SET bal = bal - 20 WHERE id = 2; }
step b2 { UPDATE acct SET bal = bal + 20 WHERE id = 1; }
step c2 { COMMIT; }
"""


def _spec(tmp_path: Path, text: str, name: str = "x.spec") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_write_skew_shows_only_at_serializable(servers: Servers, tmp_path: Path) -> None:
    """Every one of the 20 interleavings commits both at read committed and repeatable
    read (the skew goes through); SERIALIZABLE fails one of the two in all but the two
    serial orders."""
    assert servers.pg is not None
    res = {r.level: r for r in explore_spec(_spec(tmp_path, WRITE_SKEW), servers.pg.dsn)}
    assert list(res) == ["read committed", "repeatable read", "serializable"]
    assert res["read committed"].cell() == "ok 20/20"
    assert res["repeatable read"].cell() == "ok 20/20"
    assert res["serializable"].cell() == "ok 2/20, 40001 in 18"
    serial = {o.first for o in res["serializable"].outcomes.values() if o.ending == "ok"}
    assert serial == {"r1 w1 c1 r2 w2 c2"}  # the first ok one kept: a serial order


def test_cross_updates_deadlock_or_are_invalid(servers: Servers, tmp_path: Path) -> None:
    """Two sessions updating two rows in opposite orders: 8 of the 20 interleavings ask a
    session for a step while it waits (invalid), the 8 that cross deadlock (one 40P01
    each), the 4 that do not cross commit."""
    assert servers.pg is not None
    spec = _spec(tmp_path, CROSS)
    (rc,) = explore_spec(spec, servers.pg.dsn, "read_committed", deadlock_ms=50)
    assert rc.cell() == "ok 4/12, 40P01 in 8, (invalid 8 of 20)"
    endings = {o.ending for o in rc.outcomes.values()}
    assert endings == {"ok", "invalid", "s1 b1 40P01", "s2 b2 40P01"}


HOLDS = """setup { CREATE TABLE t (i int); INSERT INTO t VALUES (1); }
teardown { DROP TABLE t; }
session s1
step s1u { BEGIN; UPDATE t SET i = i + 1; }
teardown { ROLLBACK; }
session s2
step s2u { UPDATE t SET i = i + 1; }
step s2r { SELECT i FROM t; }
"""


def test_a_session_past_its_last_step_keeps_its_locks(servers: Servers, tmp_path: Path) -> None:
    """s1's only step leaves its transaction open; s2 waits on its row. s2's next step
    then comes due while s1, its steps done, could still move (a spec's session outlives
    its steps): invalid, as the tester has it, not a wait for the server (which would
    never break this wait). A session whose connection the server ended mid-step
    shows the server's 57P01 (tests/data/isolation/specs/terminate.spec)."""
    assert servers.pg is not None
    (rc,) = explore_spec(_spec(tmp_path, HOLDS), servers.pg.dsn, "read_committed")
    assert rc.cell() == "ok 2/2, (invalid 1 of 3)"
    assert rc.outcomes["invalid"].first == "s1u s2u s2r"
    specs = Path(__file__).parent / "data" / "isolation" / "specs"
    (rc,) = explore_spec(specs / "terminate.spec", servers.pg.dsn, "read_committed")
    assert rc.outcomes["s2 s2lock 57P01"].first == "s1lock s2lock s1kill s1c"
    assert rc.outcomes["invalid"].first == "s2lock s1lock s1kill s1c"


def test_a_teardown_that_waits_on_an_open_transaction_is_a_bad_spec(
    servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s1's only step leaves its transaction open and no teardown ends it: the spec's
    DROP TABLE would wait for ever (the tester hangs). Explore cancels it at the tester's
    limit (2 s here) and says so in one line naming the file and the permutation."""
    assert servers.pg is not None
    monkeypatch.setenv("PG_TEST_TIMEOUT_DEFAULT", "1")  # the limit: 2 s (PostgreSQL 16+)
    monkeypatch.setenv("PGISOLATIONTIMEOUT", "2")  # and on 15
    spec = _spec(tmp_path, HOLDS.replace("teardown { ROLLBACK; }\n", ""), "open.spec")
    with pytest.raises(
        LabError,
        match=r"open\.spec: teardown did not finish in 2 s after "
        r"permutation s2u s1u s2r \(a session's transaction is still open",
    ):
        explore_spec(spec, servers.pg.dsn, "read_committed")


def test_a_spec_with_its_own_level_runs_once(servers: Servers, tmp_path: Path) -> None:
    """A spec that sets its own isolation level runs once and refuses --isolation."""
    own = WRITE_SKEW.replace("BEGIN;", "BEGIN ISOLATION LEVEL SERIALIZABLE;")
    assert levels_for(own, None) == ["the spec's own"]
    with pytest.raises(LabError, match="sets its own isolation level"):
        levels_for(own, "read_committed")
    assert servers.pg is not None
    (r,) = explore_spec(_spec(tmp_path, own), servers.pg.dsn)
    assert r.cell() == "ok 2/20, 40001 in 18"


def test_the_command_prints_a_table_and_keeps_a_record(servers: Servers, tmp_path: Path) -> None:
    """`locklab explore FILE.spec` prints a table of outcomes and writes a record."""
    assert servers.pg is not None
    spec, results = _spec(tmp_path, WRITE_SKEW, "skew.spec"), tmp_path / "results"
    dsn = ("--pg-dsn", servers.pg.dsn)
    proc = locklab("explore", str(spec), "--isolation", "serializable", *dsn, results=results)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:2] == [
        "skew.spec: every interleaving (20 permutations)",
        "  serializable  ok 2/20, 40001 in 18",
    ]
    (record,) = results.rglob("explore-spec/skew.json")
    data = json.loads(record.read_text())
    assert [lv["level"] for lv in data["levels"]] == ["serializable"]
    bad = locklab("explore", str(spec), "--isolation", "dirty", *dsn, results=tmp_path / "r2")
    assert bad.returncode == 2
    assert_one_line_error(bad, r"--isolation 'dirty'", tmp_path / "r2")
    svg = locklab("explore", str(spec), "--svg", str(tmp_path / "x.svg"), results=tmp_path / "r3")
    assert_one_line_error(svg, r"--svg: not for an isolation spec", tmp_path / "r3")
    broken = _spec(tmp_path, "session s1\nstep a { SELECT 1; }\npermutation a b\n", "bad.spec")
    parse = locklab("explore", str(broken), results=tmp_path / "r4")
    assert parse.returncode == 2
    assert_one_line_error(parse, rf"{broken}:3", tmp_path / "r4")
