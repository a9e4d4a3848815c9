"""Package docstrings say what is in the package (issue 34), checked so they cannot drift.

The rule, for the docstring of every package under lab/ (lab/<layer>/ and the packages
inside one, such as lab/output/svg/):

* from the line that starts with ``The package:`` to the end, the docstring lists the
  package's modules, each written as ``name`` between double backticks; every public
  module (a ``.py`` file whose name does not start with ``_``, or a subpackage) is listed
  there, and every lower-case ``name`` there is one of them. Other literals in that part
  are written between single backticks (`Rules`);
* anywhere in the docstring, a bare ``name.py`` (not part of a path) is a module of the
  package, a path ``lab/...`` exists and a dotted ``lab.a.b`` is a module.

docs/architecture.md's layer block (its first fenced block) has a line starting with
``lab/<name>/`` for every package directly under lab/, no such line for one that is not
there, and every ``lab/...`` path it names exists.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAB = REPO / "lab"
ARCHITECTURE = REPO / "docs" / "architecture.md"
LIST_START = "The package:"

LISTED = re.compile(r"``([a-z_][a-z0-9_]*)``")  # a module named in the list
BARE_FILE = re.compile(r"(?<![\w/.-])([A-Za-z_]\w*)\.py\b")  # name.py, not inside a path
LAB_PATH = re.compile(r"(?<![\w/.-])lab/[\w/.]*")  # lab/pinned/fastreset.py, lab/output/
LAB_DOTTED = re.compile(r"(?<![\w/.-])lab\.[\w.]*")  # lab.output.svg
LAYER_LINE = re.compile(r"^lab/(\w+)/", re.MULTILINE)  # a layer's line in the block


def packages() -> list[Path]:
    """Every package under lab/ (lab itself aside), as its folder."""
    return sorted(
        init.parent
        for init in LAB.rglob("__init__.py")
        if init.parent != LAB and "__pycache__" not in init.parts
    )


def public_modules(package: Path) -> set[str]:
    """The package's public modules: its .py files not starting with "_", its subpackages."""
    files = {p.stem for p in package.glob("*.py") if not p.name.startswith("_")}
    subpackages = {
        p.name
        for p in package.iterdir()
        if (p / "__init__.py").is_file() and not p.name.startswith("_")
    }
    return files | subpackages


def missing_references(text: str, root: Path) -> list[str]:
    """The `lab/...` paths and dotted `lab.a.b` modules in `text` that `root` does not hold."""
    missing = []
    for ref in (m.rstrip(".") for m in LAB_PATH.findall(text)):
        if not (root / ref).exists():
            missing.append(f"{ref} does not exist")
    for ref in (m.rstrip(".") for m in LAB_DOTTED.findall(text)):
        path = root / ref.replace(".", "/")
        if not (path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()):
            missing.append(f"{ref} is not a module")
    return missing


def docstring_problems(doc: str, modules: set[str], root: Path) -> list[str]:
    """What a package docstring gets wrong about its package's `modules` (empty: nothing)."""
    if LIST_START not in doc:
        return [f"no {LIST_START!r} part listing the modules"]
    listed = set(LISTED.findall(doc[doc.index(LIST_START) :]))
    problems = [f"module {name} is not listed" for name in sorted(modules - listed)]
    problems += [f"``{name}`` is not a module here" for name in sorted(listed - modules)]
    bare = set(BARE_FILE.findall(doc))
    problems += [f"{name}.py is not a module here" for name in sorted(bare - modules)]
    return problems + missing_references(doc, root)


def layer_block(markdown: str) -> str:
    """The first fenced block of a markdown text ("" when it has none)."""
    parts = markdown.split("```")
    return parts[1] if len(parts) > 2 else ""


def layer_block_problems(block: str, layers: set[str], root: Path) -> list[str]:
    """What the layer block gets wrong about the packages directly under lab/ (`layers`)."""
    named = set(LAYER_LINE.findall(block))
    problems = [f"lab/{name}/ has no line in the layer block" for name in sorted(layers - named)]
    problems += [f"lab/{name}/ is not a package of lab/" for name in sorted(named - layers)]
    return problems + missing_references(block, root)


@pytest.mark.parametrize("package", packages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_package_docstring_lists_its_modules(package: Path) -> None:
    """A package's docstring lists every public module it has and names none it has not."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
    assert doc, f"{package.relative_to(REPO).as_posix()} has no docstring"
    assert docstring_problems(doc, public_modules(package), REPO) == []


def test_architecture_names_every_layer() -> None:
    """The layer block has a line per package of lab/ and names no path that is not there."""
    layers = {p.name for p in packages() if p.parent == LAB}
    block = layer_block(ARCHITECTURE.read_text(encoding="utf-8"))
    assert LAYER_LINE.search(block), "docs/architecture.md's first fenced block is not the layers"
    assert layer_block_problems(block, layers, REPO) == []


def test_the_docstring_checks_can_fail(tmp_path: Path) -> None:
    """A made-up docstring or layer block that misses a module or names a gone one is reported."""
    (tmp_path / "lab" / "kit").mkdir(parents=True)
    (tmp_path / "lab" / "kit" / "waiters.py").touch()
    modules = {"autopipe", "waiters"}
    doc = (
        "Parts.\n\nThe package: ``waiters`` (as data), ``redislock`` (moved), see\n"
        "lab/kit/waiters.py, lab/kit/gone.py, lab.kit.waiters, lab.kit.gone and old.py.\n"
    )
    assert docstring_problems(doc, modules, tmp_path) == [
        "module autopipe is not listed",
        "``redislock`` is not a module here",
        "old.py is not a module here",
        "lab/kit/gone.py does not exist",
        "lab.kit.gone is not a module",
    ]
    good = "Parts.\n\nThe package: ``autopipe`` (a client), ``waiters`` (lab/kit/waiters.py).\n"
    assert docstring_problems(good, modules, tmp_path) == []
    assert docstring_problems("Parts: autopipe, waiters.", modules, tmp_path) == [
        "no 'The package:' part listing the modules"
    ]
    block = "\nlab/kit/   parts\nlab/gone/  moved (lab/gone/x.py)\n"
    assert layer_block_problems(block, {"kit", "core"}, tmp_path) == [
        "lab/core/ has no line in the layer block",
        "lab/gone/ is not a package of lab/",
        "lab/gone/ does not exist",
        "lab/gone/x.py does not exist",
    ]
