"""docs/write-a-scenario.md runs as printed: its code traces to its printed transcript."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lab.cli import app
from lab.servers import Servers

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


def test_the_tutorial_starts_from_new_and_its_claim_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers: Servers
) -> None:
    """`locklab new counter` writes ./counter.py; the page's code in its place verifies with
    the verdicts and the measured lines the page prints."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    made = runner.invoke(app, ["new", "counter"])
    assert made.exit_code == 0, made.output
    assert Path("counter.py").is_file()
    [code] = blocks("python")
    Path("counter.py").write_text(code)
    assert servers.pg is not None
    result = runner.invoke(
        app, ["verify", "counter.py", "--json", "--no-record", "--pg-dsn", servers.pg.dsn]
    )
    assert result.exit_code == 0, result.output
    verdicts = [v for r in json.loads(result.stdout)["scenarios"] for v in r["verdicts"]]
    assert [(v["id"], v["status"]) for v in verdicts] == [("CT-1", "held"), ("CT-1", "held")]
    printed = re.findall(r"`((?:buggy|fixed): read_committed: [^`]+)`", DOC.read_text())
    assert len(printed) == 2
    for line, verdict in zip(printed, verdicts, strict=True):
        assert verdict["measured"].startswith(line), (line, verdict["measured"])
