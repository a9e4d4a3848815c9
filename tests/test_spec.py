"""Isolation specs: the lab's runner against PostgreSQL's own isolationtester.

Each spec under tests/data/isolation/specs runs through `lab.spec.run_spec` and through the real
tester (the server's build's own, found by its pg_config) on the same embedded server, a
fresh database each; the two texts must be byte-identical, and equal to the golden
expected/<name>.out (made by the tester). Bad specs are one-line errors naming file and
line. The parser's tests need no server.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.servers import Servers
from lab.servers.base import with_database
from lab.spec import SpecError, parse_spec, read_spec, run_spec, trace_spec
from lab.spec.run import all_permutations
from lab.spec.wire import PgConn, message_text

SUITE = Path(__file__).parent / "data" / "isolation"  # laid out like src/test/isolation
SPECS, EXPECTED = SUITE / "specs", SUITE / "expected"
NAMES = sorted(p.stem for p in SPECS.glob("*.spec"))
# Specs whose step waits for the tester's limit (twice this: 2 s), for both runs
TIMEOUT_DEFAULT_S = {"cancel": 1, "invalid-permutation": 1, "mutual-blockers": 1}
EXIT_CODE = {"mutual-blockers": 1, "setup-fails": 1}  # the tester gives up: exit(1)


def limits(seconds: int) -> dict[str, str]:
    """The environment that gives a step `2 * seconds` before its cancel, for the tester
    of PostgreSQL 16 and later (PG_TEST_TIMEOUT_DEFAULT, doubled) and of 15 (its own)."""
    return {"PG_TEST_TIMEOUT_DEFAULT": str(seconds), "PGISOLATIONTIMEOUT": str(2 * seconds)}


TESTER_S = 120.0  # a whole spec; the slowest (cancel) takes about 2 s


@pytest.fixture
def fresh_db(servers: Servers) -> Iterator[str]:
    """A database of its own for the tester's run; its DSN. Dropped afterwards."""
    assert servers.pg is not None
    name = f"locklab_it_{secrets.token_hex(4)}"
    admin = PgConn(servers.pg.dsn)
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(servers.pg.dsn, name)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def _ours(servers: Servers, name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    assert servers.pg is not None
    monkeypatch.delenv("PGAPPNAME", raising=False)  # a session's application_name is "/s1"
    if name in TIMEOUT_DEFAULT_S:
        for key, value in limits(TIMEOUT_DEFAULT_S[name]).items():
            monkeypatch.setenv(key, value)
    else:
        monkeypatch.delenv("PG_TEST_TIMEOUT_DEFAULT", raising=False)
        monkeypatch.delenv("PGISOLATIONTIMEOUT", raising=False)
    return trace_spec(SPECS / f"{name}.spec", servers.pg.dsn)


@pytest.mark.parametrize("name", NAMES)
def test_matches_isolationtester(
    name: str,
    servers: Servers,
    tester: tuple[Path, dict[str, str]],
    fresh_db: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lab prints byte for byte what isolationtester prints for the same spec."""
    binary, env = tester
    env = {**env, **limits(TIMEOUT_DEFAULT_S.get(name, 180))}
    spec = (SPECS / f"{name}.spec").read_bytes()
    real = subprocess.run(
        [str(binary), fresh_db],
        input=spec,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        timeout=TESTER_S,
        check=False,
    )
    text, code = _ours(servers, name, monkeypatch)
    assert (text, code) == (real.stdout.decode(), real.returncode)


@pytest.mark.parametrize("name", NAMES)
def test_matches_expected(name: str, servers: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lab's text for each spec is its golden expected/<name>.out, made by the tester."""
    text, code = _ours(servers, name, monkeypatch)
    assert code == EXIT_CODE.get(name, 0)
    assert text == (EXPECTED / f"{name}.out").read_text(encoding="utf-8")


def test_every_construct_is_covered() -> None:
    """The specs use every construct of the language: several setups, session setup and
    teardown, (*), (step), (step notices N), and a spec without permutation lines."""
    specs = [read_spec(SPECS / f"{n}.spec") for n in NAMES]
    blockers = {b.kind for s in specs for p in s.permutations for ps in p for b in ps.blockers}
    assert blockers == {"once", "step", "notices"}
    assert any(len(s.setups) > 1 for s in specs)
    assert any(not s.permutations for s in specs)
    assert any(x.setup and x.teardown for s in specs for x in s.sessions)
    assert all(s.teardown for s in specs if s.setups)


# --- the parser, no server ---

SMALL = """# a comment
setup { CREATE TABLE t (i int); }
setup {
  INSERT INTO t VALUES (1);
}
teardown { DROP TABLE t; }
session "s 1"
setup { BEGIN; }
step a$1 {	SELECT 1;   }
step "q""x" { }
teardown { COMMIT; }
session s2
step b { SELECT 2; }
permutation a$1(*) b("q""x", a$1 notices 2) "q""x"
"""


def test_parse_reads_blocks_names_and_blockers() -> None:
    """SQL blocks lose the blanks after { and before }, keep newlines; quoted names take
    "" as a quote; blockers are read in order."""
    spec = parse_spec(SMALL, "small.spec")
    assert spec.setups == ["CREATE TABLE t (i int);", "\n  INSERT INTO t VALUES (1);\n"]
    assert [s.name for s in spec.sessions] == ["s 1", "s2"]
    assert [(st.name, st.sql) for st in spec.sessions[0].steps] == [
        ("a$1", "SELECT 1;"),
        ('q"x', ""),
    ]
    (perm,) = spec.permutations
    assert [ps.name for ps in perm] == ["a$1", "b", 'q"x']
    assert [(b.kind, b.step, b.notices) for b in perm[1].blockers] == [
        ("step", 'q"x', 0),
        ("notices", "a$1", 2),
    ]
    assert perm[0].blockers[0].kind == "once"


def test_all_permutations_in_the_testers_order() -> None:
    """Without permutation lines: every interleaving, first session's next step first."""
    spec = parse_spec("session a\nstep a1 {}\nstep a2 {}\nsession b\nstep b1 {}\n")
    orders = [" ".join(ps.name for ps in p) for p in all_permutations(spec)]
    assert orders == ["a1 a2 b1", "a1 b1 a2", "b1 a1 a2"]


def test_unused_step_is_a_warning() -> None:
    """A step no permutation names is the tester's warning, printed before it starts."""
    spec = parse_spec("session a\nstep a1 {}\nstep a2 {}\npermutation a1\n")
    assert spec.warnings == ["unused step name: a2\n"]


BAD = [
    ("session s1\nstep a { SELECT 1; }\n\nstep b SELECT\n", 4, "syntax error"),
    ("session s1\nstep a { SELECT 1; }\npermutation a\n  zz\n", 4, 'undefined step "zz"'),
    ("session s1\nstep a { SELECT 1;\n", 2, "unterminated sql block"),
    ("session s1\nstep a {}\nstep a {}\n", 3, "duplicate step name: a"),
    ("session s1\nstep a {}\nstep b {}\npermutation a(b) b\n", 4, "cannot block on its own"),
    ("session s1\nstep a {}\npermutation a(zz)\n", 3, 'undefined blocking step "zz"'),
    ('session "s1\nstep a {}\n', 1, "unexpected newline in quoted identifier"),
    ("SESSION s1\nstep a {}\n", 1, "syntax error"),
    ("session s1\nstep a {}\npermutation a ;\n", 3, "unexpected character ';'"),
    ("setup { SELECT 1; }\n", 2, "syntax error at end of file"),
]


@pytest.mark.parametrize(("text", "line", "what"), BAD)
def test_bad_spec_is_one_line_with_file_and_line(
    tmp_path: Path, text: str, line: int, what: str
) -> None:
    """A bad spec is a SpecError (a LabError: the CLI prints its one line, exit 2) naming
    the file and the line, and nothing runs."""
    path = tmp_path / "bad.spec"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        trace_spec(path, "postgresql://nobody@127.0.0.1:1/none")
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: ")
    assert what in message
    assert "\n" not in message
    assert isinstance(caught.value, LabError)


def test_a_wait_nothing_releases_is_cancelled_at_the_limit(servers: Servers) -> None:
    """A step still waiting when the permutation ends is cancelled after the tester's limit
    (`wait_s` here) and completes with the cancel's error; the run goes on (exit 0)."""
    assert servers.pg is not None
    spec = parse_spec(
        "setup { CREATE TABLE t (i int); }\n"
        "session s1\nstep l1 { BEGIN; LOCK t; }\n"
        "session s2\nstep l2 { BEGIN; LOCK t; }\n"
        "permutation l1 l2\n"
    )
    text, code = run_spec(spec, servers.pg.dsn, wait_s=0.5)
    assert code == 0
    assert text.splitlines()[-4:] == [
        "step l2: BEGIN; LOCK t; <waiting ...>",
        "isolationtester: canceling step l2 after 0 seconds",
        "step l2: <... completed>",
        "ERROR:  canceling statement due to user request",
    ]


B50, C56 = "b" * 51, "c" * 56
CURSORS = [  # what isolationtester printed for these setups (libpq's error cursor)
    (
        f"SELECT 1 AS {'a' * 29}, 2 AS {B50}, nosuch, 3 AS {C56}, 4 AS {'d' * 24};",
        f"LINE 1: ...{B50[:-3]}, nosuch, 3 ...\n{' ' * 61}^\n",
    ),
    (
        f"SELECT 1 AS a, nosuch, 3 AS {C56}, 4 AS {'d' * 24};",
        f"LINE 1: SELECT 1 AS a, nosuch, 3 AS {C56[:32]}...\n{' ' * 23}^\n",
    ),
    (
        f'SELECT 1 AS "gr{"ü" * 80}", nosuch;',
        f'LINE 1: ...{"ü" * 50}", nosuch;\n{" " * 64}^\n',
    ),
    ("SELECT i\n  FROM t\n WHERE nosuch = 1;", "LINE 3:  WHERE nosuch = 1;\n" + " " * 15 + "^\n"),
]


@pytest.mark.parametrize(("query", "cursor"), CURSORS)
def test_error_cursor_is_libpqs(query: str, cursor: str) -> None:
    """An error with a position shows the statement's line cut to 60 columns around it,
    and a caret under it, as libpq words the message."""
    fields = {"S": "ERROR", "M": 'column "nosuch" does not exist'}
    fields["P"] = str(query.index("nosuch") + 1)
    head = 'ERROR:  column "nosuch" does not exist\n'
    assert message_text(fields, query, is_error=True) == head + cursor
