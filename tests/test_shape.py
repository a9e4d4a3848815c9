"""Converted scenarios keep the shape (no server needed): the code under test on one
screen, and none of the machinery the harness owns."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from lab.scenario import Scenario
from scenarios import SCENARIOS

PINNED = [s for s in SCENARIOS if s.pinned is not None]
MAX_LINES = 150
# the harness owns processes, threads, per-run state and waits
FORBIDDEN_IMPORTS = {"subprocess", "multiprocessing", "threading", "weakref", "signal"}


def _files(sc: Scenario) -> list[Path]:
    assert sc.pinned is not None
    code = sys.modules[next(iter(sc.pinned.code.values())).__module__]
    folder = Path(str(code.__file__)).parent
    return sorted(folder.glob("*.py"))


@pytest.mark.parametrize("sc", PINNED, ids=[s.id for s in PINNED])
def test_code_under_test_fits_one_screen(sc: Scenario) -> None:
    """scenarios/<id>/<id>.py, the code under test, is at most ~150 lines."""
    assert sc.pinned is not None
    code = sys.modules[next(iter(sc.pinned.code.values())).__module__]
    lines = Path(str(code.__file__)).read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"{sc.id}: {len(lines)} lines"


def violations(source: str, name: str = "<file>") -> list[str]:
    """Where `source` spawns processes or threads, keeps per-run state or writes a wait loop."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            if {a.name.split(".")[0] for a in node.names} & FORBIDDEN_IMPORTS:
                found.append(f"{where} imports {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in FORBIDDEN_IMPORTS:
                found.append(f"{where} imports from {node.module}")
        elif isinstance(node, (ast.While, ast.Global, ast.Nonlocal)):
            found.append(f"{where} {type(node).__name__.lower()}")
    return found


@pytest.mark.parametrize("sc", PINNED, ids=[s.id for s in PINNED])
def test_no_processes_run_state_or_wait_loops(sc: Scenario) -> None:
    """No converted scenario file spawns processes or threads, keeps module-level run
    state (weakref maps, globals) or writes its own wait loop (any `while`)."""
    for path in _files(sc):
        assert violations(path.read_text(), path.name) == []


def test_the_static_check_can_fail() -> None:
    """The check sees a weakref map, a subprocess and a polling loop."""
    bad = (
        "import weakref\nfrom subprocess import Popen\nasync def f(r):\n"
        "    while not await r.get('k'):\n        pass\n"
    )
    assert [v.split(" ", 1)[1] for v in violations(bad)] == [
        "imports weakref",
        "imports from subprocess",
        "while",
    ]
