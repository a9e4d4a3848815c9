"""Named SQL beside a scenario (lab/core/sqlfile.py): one line per statement, clear errors,
and every such file ships in the wheel."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import pytest

from lab.core.sqlfile import statements
from lab.errors import LabError

REPO = Path(__file__).resolve().parents[1]


def test_a_statement_over_several_lines_reads_as_one(tmp_path: Path) -> None:
    """A named statement in a .sql file may span lines and reads as one statement."""
    (tmp_path / "m.sql").write_text(
        "-- a comment\n-- name: one\nSELECT 1\n  FROM t\n\n-- name: two\nSELECT 2\n"
    )
    assert statements(str(tmp_path / "m.py")) == {"one": "SELECT 1 FROM t", "two": "SELECT 2"}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "m.sql:3: a is named twice"),
        ("SELECT 1\n", "m.sql:1: SQL before the first '-- name:' line"),
    ],
)
def test_a_bad_file_is_one_line_naming_where(tmp_path: Path, text: str, error: str) -> None:
    """A malformed .sql file is one LabError naming the file and the line."""
    (tmp_path / "m.sql").write_text(text)
    with pytest.raises(LabError, match=re.escape(error)):
        statements(str(tmp_path / "m.py"))


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    """A missing .sql file is one LabError naming it."""
    with pytest.raises(LabError, match=re.escape("m.sql: cannot read it")):
        statements(str(tmp_path / "m.py"))


def test_every_sql_file_of_a_scenario_is_package_data() -> None:
    """Every scenario's .sql file is package data, so an installed wheel has it."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = data["package-data"]["*"]
    files = sorted((REPO / "scenarios").rglob("*.sql"))
    assert files, "no .sql file: this test would check nothing"
    for f in files:
        name = f.relative_to(f.parent).as_posix()
        assert any(fnmatch.fnmatch(name, g) for g in globs), f"{f.name} would not ship"
