"""requirements.txt agrees with pyproject.toml: every range is met by the locked version."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.txt"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCKED_EXTRAS = tuple(PROJECT["optional-dependencies"])  # every one: `make venv` has them all


def locked_versions(text: str) -> dict[str, str]:
    """Name -> version of every `name==version` line of a pip-compile lock."""
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", text, re.MULTILINE)
    return {canonicalize_name(name): version for name, version in pins}


def project_requirements() -> list[Requirement]:
    """The ranges the lock must meet: dependencies, the locked extras and the build's own."""
    given = list(PROJECT["dependencies"])
    for extra in LOCKED_EXTRAS:
        given += PROJECT["optional-dependencies"][extra]
    given += tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    build_in = (ROOT / "requirements" / "build.in").read_text().splitlines()
    given += [line for line in build_in if line.strip() and not line.startswith("#")]
    return [Requirement(line) for line in given]


def disagreements(requirements: list[Requirement], pins: dict[str, str]) -> list[str]:
    """One line for each requirement the lock leaves out or pins outside its range."""
    found = []
    for req in requirements:
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # not for this platform (the lock is made on Linux, Python 3.11)
        pinned = pins.get(canonicalize_name(req.name))
        if pinned is None:
            found.append(f"{req.name}: in pyproject.toml, not in the lock")
        elif not req.specifier.contains(pinned, prereleases=True):
            found.append(f"{req.name}: locked {pinned}, pyproject.toml asks {req.specifier}")
    return found


def test_every_project_range_is_met_by_the_lock() -> None:
    """Each dependency, extra and build requirement is locked at a version inside its range."""
    problems = disagreements(project_requirements(), locked_versions(LOCK.read_text()))
    assert problems == [], "pyproject.toml and the lock disagree (make lock):\n" + "\n".join(
        problems
    )


def test_every_locked_line_carries_a_hash() -> None:
    """pip installs the lock with --require-hashes: a pin without a hash would fail there."""
    entries = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text())
    unhashed = [e.split()[0] for e in entries if "==" in e.split()[0] and "--hash=" not in e]
    assert unhashed == []


@pytest.mark.parametrize(
    ("requirement", "pins", "problem"),
    [
        ("redis>=7.2", {"redis": "7.1.0"}, "redis: locked 7.1.0, pyproject.toml asks >=7.2"),
        ("jinja2>=3.1", {}, "jinja2: in pyproject.toml, not in the lock"),
    ],
)
def test_a_disagreement_is_named(requirement: str, pins: dict[str, str], problem: str) -> None:
    """A range the lock misses, or a package it lacks, is reported by name."""
    assert disagreements([Requirement(requirement)], pins) == [problem]


def test_a_lock_line_with_a_marker_is_read() -> None:
    """A pin followed by an environment marker still counts as locked."""
    assert locked_versions('uvloop==0.23.0 ; sys_platform != "win32" \\\n') == {"uvloop": "0.23.0"}


def test_make_lock_compiles_every_extra() -> None:
    """An extra added to pyproject.toml must be in `make lock`'s flags, or make venv lacks it."""
    makefile = (ROOT / "Makefile").read_text()
    assert [e for e in LOCKED_EXTRAS if f"--extra {e}" not in makefile] == []
