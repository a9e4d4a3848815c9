"""What ran is recorded: `locklab --version`, every record's `lab` entry (the client
libraries' versions with the commit) and `locklab diff` when a library changed."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lab.cli import app
from lab.core.provenance import LIBRARIES, lab_info
from lab.errors import LabError
from lab.output.diff import diff_runs
from lab.servers import embedded
from tests.test_verify import make_record

runner = CliRunner()


def test_version_names_the_lab_its_servers_and_libraries() -> None:
    """--version without a command: the lab, the servers a run would use, the libraries."""
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("locklab ") and "commit" in lines[0]
    assert any(line.startswith("postgresql: ") for line in lines), lines
    assert any(line.startswith("redis: ") for line in lines), lines
    assert any(line.startswith("pgbouncer: ") for line in lines), lines
    asyncpg = importlib.metadata.version("asyncpg")
    assert f"asyncpg {asyncpg}" in lines[-1] and lines[-1].startswith("libraries: ")


def test_a_run_record_carries_the_libraries(tmp_path: Path) -> None:
    """A record written by `locklab run` has every library's version beside the commit."""
    result = runner.invoke(
        app, ["--results-dir", str(tmp_path), "run", "lost-update", "-v", "buggy"]
    )
    assert result.exit_code == 0, result.output
    (path,) = tmp_path.glob("*/lost-update.buggy.json")
    lab = json.loads(path.read_text())["lab"]
    assert lab == json.loads(json.dumps(lab_info()))
    assert set(lab["libraries"]) == set(LIBRARIES)
    assert lab["libraries"]["redis"] == importlib.metadata.version("redis")


def test_diff_names_a_library_that_changed() -> None:
    """Two runs whose asyncpg differs: diff shows that line changed, the others the same."""
    a, b = make_record("buggy", {"ok": 1}, run_id="A"), make_record("buggy", {"ok": 1}, run_id="B")
    a["lab"] = {**lab_info(), "libraries": {"asyncpg": "0.30.0", "redis": "8.2.0"}}
    b["lab"] = {**lab_info(), "libraries": {"asyncpg": "0.31.0", "redis": "8.2.0"}}
    context = {c.field: c for c in diff_runs([a], [b], "A", "B").context}
    assert context["asyncpg"].changed and (context["asyncpg"].a, context["asyncpg"].b) == (
        "0.30.0",
        "0.31.0",
    )
    assert not context["redis"].changed


def test_no_redis_binary_names_the_extra_and_the_apt_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No server binary anywhere: one line that says which package provides it."""
    monkeypatch.setattr(embedded, "redis_server_candidates", lambda: [])
    monkeypatch.delenv("LOCKLAB_REDIS_VERSION", raising=False)
    with pytest.raises(LabError) as caught:
        embedded.find_redis_server()
    message = str(caught.value)
    assert "\n" not in message
    assert "pip install 'locklab[servers]'" in message and "apt-get install redis-server" in message
