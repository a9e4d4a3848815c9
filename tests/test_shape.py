"""Converted scenarios keep the shape (no server needed): the code under test on one
screen, and none of the machinery the harness owns."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import scenarios
from scenarios import MODULES

ROOT = Path(str(scenarios.__file__)).parent
# Every scenario in the folder shape: scenarios/<module>/<module>.py is its code under test.
# Not there yet, said so (strict: the mark fails the day the module gets there).
NOT_YET: dict[str, str] = {}
FOLDERS = [
    pytest.param(m, marks=pytest.mark.xfail(reason=NOT_YET[m], strict=True)) if m in NOT_YET else m
    for m in MODULES
    if (ROOT / m / f"{m}.py").is_file()
]
MAX_LINES = 150
# the harness owns processes, threads, per-run state and waits
FORBIDDEN_IMPORTS = {"subprocess", "multiprocessing", "threading", "weakref", "signal"}


@pytest.mark.parametrize("module", FOLDERS)
def test_code_under_test_fits_one_screen(module: str) -> None:
    """scenarios/<module>/<module>.py, the code under test, is at most ~150 lines."""
    lines = (ROOT / module / f"{module}.py").read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"{module}: {len(lines)} lines"


def test_pinned_code_is_the_code_under_test() -> None:
    """A scenario's pinned sessions run the code of scenarios/<module>/<module>.py."""
    for module in MODULES:
        sc = scenarios.get(module.replace("_", "-"))
        if sc.pinned is not None:
            code = sys.modules[next(iter(sc.pinned.code.values())).__module__]
            assert Path(str(code.__file__)) == ROOT / module / f"{module}.py"


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


@pytest.mark.parametrize("module", FOLDERS)
def test_no_processes_run_state_or_wait_loops(module: str) -> None:
    """No converted scenario file spawns processes or threads, keeps module-level run
    state (weakref maps, globals) or writes its own wait loop (any `while`)."""
    for path in sorted((ROOT / module).glob("*.py")):
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


def test_every_scenario_is_a_folder() -> None:
    """Each scenario of the catalogue has its code under test in scenarios/<m>/<m>.py."""
    assert [m for m in MODULES if not (ROOT / m / f"{m}.py").is_file()] == []


@pytest.mark.parametrize("path", sorted(ROOT.glob("_*.py")), ids=lambda p: p.name)
def test_shared_scenario_modules_keep_the_shape(path: Path) -> None:
    """Code several scenarios share (scenarios/_*.py) is scenario code too: no processes,
    run state or wait loops of its own."""
    assert violations(path.read_text(), path.name) == []


def test_no_scenario_file_hides_its_format_or_runs_past_100_columns() -> None:
    """Every .py file under scenarios/ is as ruff formats it (no `# fmt: skip`) and has no
    line over 100 characters (a long statement goes in a .sql beside it: lab/core/sqlfile)."""
    found = [
        f"{path.relative_to(ROOT.parent)}:{n}"
        for path in sorted(ROOT.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > 100 or "fmt: skip" in line
    ]
    assert not found, found
