"""docs/write-a-scenario.md runs as printed: its code traces to its printed transcript."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from lab.cli import app

DOC = Path(__file__).parent.parent / "docs" / "write-a-scenario.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_tutorial_scenario_traces_as_the_page_shows(tmp_path: Path) -> None:
    """The page's one Python block, saved as counter.py, prints the page's transcript."""
    [code] = blocks("python")
    [expected] = blocks("text")
    path = tmp_path / "counter.py"
    path.write_text(code)
    result = CliRunner().invoke(app, ["trace", str(path), "-v", "buggy"])
    assert result.exit_code == 0, result.output
    assert result.stdout == expected


def test_a_missing_scenario_file_is_one_line(tmp_path: Path) -> None:
    """A path that is not there: one line, exit 2."""
    result = CliRunner().invoke(app, ["trace", str(tmp_path / "nope.py")])
    assert result.exit_code == 2
    assert "no such scenario file" in result.stderr
