"""A user's own scenario file, named by path wherever a catalogue id is accepted."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lab.cli import app
from lab.core.loader import load_file, load_path
from lab.core.scenario import Declared, Scenario
from lab.errors import LabError
from lab.servers import Servers

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = Path(__file__).parent / "data" / "user_scenarios" / "my_checkout.py"


def locklab(
    *args: str, cwd: Path, servers: Servers | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("LOCKLAB_RESULTS", None)
    env["PYTHONPATH"] = str(ROOT)  # the lab itself, run from the user's folder
    if servers is not None and servers.pg is not None:
        env["LOCKLAB_PG_DSN"] = servers.pg.dsn  # the session's server: no start per command
    return subprocess.run(
        [sys.executable, "-m", "lab.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
    )


def test_loading_registers_nothing() -> None:
    """Loading a file returns its SCENARIO; the catalogue stays what scenarios/ lists."""
    from scenarios import SCENARIOS, by_id

    before = list(SCENARIOS)
    sc = load_file(EXAMPLE)
    assert sc.id == "my-checkout" and set(sc.variants) == {"buggy", "fixed"}
    assert list(SCENARIOS) == before and "my-checkout" not in by_id()
    assert load_file(EXAMPLE) is sc  # loaded once per process


def test_file_without_scenario_is_one_line(tmp_path: Path) -> None:
    """A file that defines no SCENARIO, or fails to import: one line, exit 2."""
    (tmp_path / "empty.py").write_text("X = 1\n")
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere\n")
    (tmp_path / "wrong.py").write_text("SCENARIO = 'checkout'\n")
    proc = locklab("run", "./empty.py", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("locklab: "), lines
    assert "defines no SCENARIO; a scenario file must define SCENARIO = Scenario(...)" in lines[0]
    for name, words in [
        ("broken.py", "importing it failed: ModuleNotFoundError"),
        ("wrong.py", "defines SCENARIO of type str"),
        ("missing.py", "no such scenario file"),
    ]:
        with pytest.raises(LabError, match=words):
            load_path(str(tmp_path / name))
    (tmp_path / "nothing").mkdir()
    with pytest.raises(LabError, match="no scenario files"):
        load_path(str(tmp_path / "nothing"))


def test_run_file_records_under_the_current_folder(tmp_path: Path, servers: Servers) -> None:
    """`locklab run ./my_checkout.py`: both variants run; records go to ./results."""
    shutil.copy(EXAMPLE, tmp_path / "my_checkout.py")
    proc = locklab("run", "./my_checkout.py", cwd=tmp_path, servers=servers)
    assert proc.returncode == 0, proc.stderr
    assert "buggy" in proc.stdout and "MY-1" in proc.stdout
    records = sorted(p.name for p in (tmp_path / "results").rglob("*.json"))
    assert records == ["my-checkout.buggy.json", "my-checkout.fixed.json"]
    rec = json.loads(next((tmp_path / "results").rglob("my-checkout.fixed.json")).read_text())
    assert rec["outcomes"] == {"ok": 1, "out_of_stock": 1}


def test_folder_show_compare_verify(tmp_path: Path, servers: Servers) -> None:
    """A folder runs every file in it; show/compare/verify take a file path too."""
    folder = tmp_path / "mine"
    folder.mkdir()
    shutil.copy(EXAMPLE, folder / "my_checkout.py")
    text = EXAMPLE.read_text().replace('id="my-checkout"', 'id="my-checkout-2"')
    (folder / "my_checkout_2.py").write_text(text)
    (folder / "_helpers.py").write_text("raise SystemExit('a private module is not a scenario')\n")
    proc = locklab(
        "run", "mine", "-v", "fixed", "--no-record", "--json", cwd=tmp_path, servers=servers
    )
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["scenario"] for line in proc.stdout.splitlines()] == [
        "my-checkout",
        "my-checkout-2",
    ]
    # The other commands in-process (typer's runner): the same find_scenario, no start-up.
    runner = CliRunner()
    env = {"LOCKLAB_PG_DSN": servers.pg.dsn if servers.pg else ""}
    res = runner.invoke(app, ["show", str(folder)], env=env)
    assert res.exit_code == 2 and "a folder of 2 scenarios" in res.output
    res = runner.invoke(app, ["show", str(folder / "my_checkout.py")], env=env)
    assert res.exit_code == 0 and res.stdout.startswith("My checkout: the last item sold twice")
    res = runner.invoke(
        app, ["compare", str(folder / "my_checkout.py"), "--no-record", "--json"], env=env
    )
    assert res.exit_code == 0, res.output
    assert {json.loads(line)["variant"] for line in res.stdout.splitlines()} == {"buggy", "fixed"}
    res = runner.invoke(app, ["verify", str(folder / "my_checkout.py"), "--no-record"], env=env)
    assert res.exit_code == 0, res.output
    assert "2 claims held, 0 not held" in res.stdout


def test_declare_takes_every_field_of_a_scenario_and_no_other() -> None:
    """`declare`'s typed keywords (Declared) are exactly Scenario's fields, so mypy checks
    every keyword a claims.py gives and none is missing."""
    fields = {f.name for f in dataclasses.fields(Scenario)}
    assert set(Declared.__annotations__) == fields
