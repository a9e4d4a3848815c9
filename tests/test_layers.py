"""The lab's imports go one way: down the layers (LAYERS), and no module of lab/ imports,
directly or through others, a module that imports it back. Every import counts, those
inside functions and under TYPE_CHECKING too (an import that only hides in a function is
still an import)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import lab

ROOT = Path(str(lab.__file__)).parent
# Bottom to top; a module may import its own layer and those below (docs/architecture.md).
LAYERS: list[tuple[str, ...]] = [
    ("lab", "lab.errors", "lab.aio"),  # the package, LabError, bounded waits
    ("lab.procs",),  # processes by PID, child processes, the lab folder and its reaper
    ("lab.servers",),  # where PostgreSQL, Redis, PgBouncer come from
    ("lab.kit",),  # parts code under test builds on: Redis clients, a lock, a provider
    ("lab.core",),  # what a scenario, a claim and a record are
    ("lab.load",),  # the harness's run: actors, connections, evidence, the record
    ("lab.pinned",),  # the ordering engine: steps granted in schedule order
    ("lab.spec",),  # PostgreSQL's isolation specs
    ("lab.gate",),  # the gate on the wire: client statements as step points
    ("lab.verify",),  # profiles run and claims judged
    ("lab.output",),  # the console and the HTML page
    ("lab.cli",),  # the commands
    ("lab.testing", "lab.pytest_plugin"),  # the pytest API for a user's own tests
]


def layer_of(module: str) -> int:
    best, rank = "", -1
    for i, names in enumerate(LAYERS):
        for n in names:
            if (module == n or module.startswith(n + ".")) and len(n) > len(best):
                best, rank = n, i
    return rank


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The lab modules `name` imports anywhere in its file."""

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        for t in targets:
            if t.startswith("lab") and (hit := resolve(t)) and hit != name:
                out.add(hit)
    return out


def cycles() -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    known = modules()
    graph = {m: imports_of(m, p, known) for m, p in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(frozenset(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    """A new module goes into a layer's package (or LAYERS says where it sits)."""
    assert [m for m in modules() if layer_of(m) < 0] == []


def test_imports_go_down_the_layers() -> None:
    """No module of lab/ imports a module of a higher layer."""
    known = modules()
    up = sorted(
        f"{m} -> {d}"
        for m, p in known.items()
        for d in imports_of(m, p, known)
        if layer_of(d) > layer_of(m)
    )
    assert not up, f"imports that go up a layer: {up}"


def test_the_layer_check_sees_an_import_up(tmp_path: Path) -> None:
    """The layer check finds an upward import inside a function (it can fail)."""
    (tmp_path / "a.py").write_text("def f():\n    from lab.cli import app\n")
    known = {"lab.core.a": tmp_path / "a.py", "lab.cli": tmp_path / "a.py"}
    assert imports_of("lab.core.a", known["lab.core.a"], known) == {"lab.cli"}
    assert layer_of("lab.cli") > layer_of("lab.core.a")


def test_no_import_cycles() -> None:
    """lab/ has no import cycles."""
    found = [sorted(c) for c in cycles()]
    assert not found, f"import cycles: {found}"


def test_the_finder_sees_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    """The cycle finder sees a cycle made by a function-level import (it can fail)."""
    (tmp_path / "a.py").write_text("def f():\n    from lab.b import g\n")
    (tmp_path / "b.py").write_text("from lab.a import f\n")
    known = {"lab.a": tmp_path / "a.py", "lab.b": tmp_path / "b.py"}
    assert imports_of("lab.a", known["lab.a"], known) == {"lab.b"}
    assert imports_of("lab.b", known["lab.b"], known) == {"lab.a"}


def test_the_process_helpers_import_only_the_standard_library() -> None:
    """lab/procs/__init__.py is imported first by every child process: no lab module, no
    third-party package."""
    tree = ast.parse((ROOT / "procs" / "__init__.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, names


def test_rich_draws_only_in_the_cli_and_output_packages() -> None:
    """The console is the CLI's and lab/output's: no other lab module imports rich."""
    known = modules()
    users = []
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            if any(n == "rich" or n.startswith("rich.") for n in names):
                users.append(name)
    outside = sorted({u for u in users if not u.startswith(("lab.cli", "lab.output"))})
    assert not outside, f"rich imported outside lab/cli and lab/output: {outside}"


def test_no_scenario_id_is_named_in_the_lab() -> None:
    """The lab knows scenarios only through their declarations: no module of lab/ names
    one (by its id or its package), not even as an example."""
    ids = [d.name for d in (ROOT.parent / "scenarios").iterdir() if (d / "__init__.py").exists()]
    pattern = re.compile(
        r"(?<![\w-])("
        + "|".join(re.escape(i.replace("_", "-")) for i in ids)
        + r"|"
        + "|".join(re.escape(i) for i in ids)
        + r")(?![\w-])"
    )
    named = sorted(
        f"{path.relative_to(ROOT.parent)}:{n}: {m[0]}"
        for path in ROOT.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if (m := pattern.search(line))
    )
    assert not named, named


# --- scenarios/ ------------------------------------------------------------------------

SCENARIOS_DIR = ROOT.parent / "scenarios"
# Modules of scenarios/ that several scenarios share on purpose (they are named here, so a
# new one is a decision, not an accident): the paused holder of redlock and
# lease-busy-loop, the node-postgres seconds of checkout-deadlock and money-transfer.
SHARED = frozenset({"scenarios._node_seconds"})


def scenario_of(module: str) -> str:
    """The scenario package a module of scenarios/ belongs to ("scenarios.redlock"), or the
    shared module itself."""
    return ".".join(module.split(".")[:2])


def private_imports(module: str, path: Path) -> list[str]:
    """Names `module` imports from another scenario (or a shared module) that are private
    there: a leading underscore on the name, or on a module of its path (SHARED aside)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = node.module or ""
        if not source.startswith("scenarios.") or scenario_of(source) == scenario_of(module):
            continue  # not a scenario's module, or one's own
        private_path = source not in SHARED and any(
            part.startswith("_") for part in source.split(".")[1:]
        )
        for alias in node.names:
            if private_path or alias.name.startswith("_"):
                found.append(f"{module}: from {source} import {alias.name}")
    return found


def scenario_modules() -> dict[str, Path]:
    found = {}
    for path in SCENARIOS_DIR.rglob("*.py"):
        parts = path.relative_to(SCENARIOS_DIR.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def test_no_scenario_imports_another_ones_private_names() -> None:
    """A scenario uses another's public names only (its code under test, its setup), and
    the shared modules named in SHARED; never a private helper of another scenario."""
    found = [f for m, p in scenario_modules().items() for f in private_imports(m, p)]
    assert not found, found


def test_the_scenario_check_sees_a_private_import(tmp_path: Path) -> None:
    """Its self-test: another scenario's `_helper`, its private module and a shared
    module's private name are caught; one's own private names and a shared module's public
    ones are not."""
    path = tmp_path / "code.py"
    path.write_text(
        "from scenarios.lease_gc_pause import _proc_state\n"
        "from scenarios.lease_gc_pause._inner import thing\n"
        "from scenarios.redlock.redlock import _own\n"
        "from scenarios._node_seconds import _shared\n"
        "from scenarios._node_seconds import checkout_seconds\n"
    )
    found = private_imports("scenarios.redlock.claims", path)
    assert found == [
        "scenarios.redlock.claims: from scenarios.lease_gc_pause import _proc_state",
        "scenarios.redlock.claims: from scenarios.lease_gc_pause._inner import thing",
        "scenarios.redlock.claims: from scenarios._node_seconds import _shared",
    ]
