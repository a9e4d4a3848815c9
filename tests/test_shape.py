"""Converted scenarios keep the shape (no server needed): code that reads as written, and
none of the machinery the harness owns."""

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
# the harness owns processes, threads, per-run state and waits
FORBIDDEN_IMPORTS = {"subprocess", "multiprocessing", "threading", "weakref", "signal"}


def is_exception(node: ast.ClassDef) -> bool:
    return any(
        isinstance(b, ast.Name) and b.id.endswith(("Exception", "Error")) for b in node.bases
    )


def dense(source: str, name: str = "<file>") -> list[str]:
    """Where `source` is written for a line counter rather than a reader: a walrus inside a
    call's arguments or binding an `and`/`or` (a precedence puzzle), a lambda given a name,
    three or more names assigned from a tuple in one statement, an exception class without
    a docstring. A file is as long as its story; these keep it from being squeezed."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):
            arguments = [*node.args, *(k.value for k in node.keywords)]
            if any(isinstance(n, ast.NamedExpr) for a in arguments for n in ast.walk(a)):
                found.append(f"{where} walrus in a call's arguments")
        elif isinstance(node, ast.NamedExpr) and isinstance(node.value, ast.BoolOp):
            found.append(f"{where} walrus binding and/or")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Lambda):
            found.append(f"{where} named lambda")
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):
            if any(isinstance(t, ast.Tuple) and len(t.elts) >= 3 for t in node.targets):
                found.append(f"{where} {len(node.value.elts)} names in one tuple assignment")
        elif isinstance(node, ast.ClassDef) and is_exception(node) and not ast.get_docstring(node):
            found.append(f"{where} exception class {node.name} without a docstring")
    return found


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_scenario_code_reads_as_written(path: Path) -> None:
    """No scenario file is squeezed: no walrus in call arguments or over and/or, no named
    lambda, no parallel assignment of three or more names, every exception class documented.
    There is no line cap: what the cap protected (no machinery in a scenario) is the test
    below, and reading is what this one measures."""
    assert dense(path.read_text(encoding="utf-8"), path.name) == []
    assert "noqa: E731" not in path.read_text(encoding="utf-8")


def test_the_reading_check_can_fail() -> None:
    """The check sees each compression the line cap once caused."""
    bad = (
        "class Refused(Exception): ...\n"
        "f = lambda x: x\n"
        "a, b, c = 1, 2, 3\n"
        "async def g(s, env):\n"
        "    await handle(s, rows := await claim(s))\n"
        "    if found := env.stale and await get(env) is not None:\n"
        "        pass\n"
    )
    assert sorted(v.split(" ", 1)[1] for v in dense(bad)) == [
        "3 names in one tuple assignment",
        "exception class Refused without a docstring",
        "named lambda",
        "walrus binding and/or",
        "walrus in a call's arguments",
    ]


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
