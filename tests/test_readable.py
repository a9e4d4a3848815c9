"""What a reader can hold (style items 13 and 15): every test says in one sentence the
behaviour it pins, no function of lab/ runs over 80 lines, no module over 500."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def undocumented_tests(source: str) -> list[str]:
    """The test functions of a module that have no docstring."""
    return [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test_")
        and not ast.get_docstring(node)
    ]


def test_every_test_says_what_it_pins() -> None:
    """Each test function opens with a docstring naming the behaviour it pins."""
    missing = [
        f"{path.name}::{name}"
        for path in sorted((REPO / "tests").glob("test_*.py"))
        for name in undocumented_tests(path.read_text(encoding="utf-8"))
    ]
    assert not missing, f"tests without a docstring: {missing}"


def test_the_docstring_check_can_fail() -> None:
    """A test without a docstring is named; one with a docstring, or a helper, is not."""
    source = (
        "def test_bare():\n    assert 1\n"
        'async def test_told():\n    """Says."""\n'
        "def helper():\n    pass\n"
    )
    assert undocumented_tests(source) == ["test_bare"]


MAX_FUNCTION = 80  # style item 15: none over 80 lines
MAX_MODULE = 500  # a module holds one concern


def long_functions(source: str, limit: int = MAX_FUNCTION) -> list[tuple[str, int]]:
    """The functions (methods and nested ones too) longer than `limit` lines."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_function_of_lab_runs_over_80_lines_nor_a_module_over_500() -> None:
    """Every function of lab/ fits in 80 lines, every module in 500."""
    too_long = []
    for path in sorted((REPO / "lab").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        where = path.relative_to(REPO).as_posix()
        too_long += [f"{where}:{name} {n} lines" for name, n in long_functions(source)]
        if len(source.splitlines()) > MAX_MODULE:
            too_long.append(f"{where} {len(source.splitlines())} lines")
    assert not too_long, too_long


def test_the_length_check_can_fail() -> None:
    """A function one line over the limit is named, with its length; one at it is not."""
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION))
    source = f"def long():\n{body}def fits():\n{body[: -len(body.splitlines()[-1]) - 1]}"
    assert long_functions(source) == [("long", MAX_FUNCTION + 1)]
