"""docs/pytest.md's Python examples run as written: copied out of the page into a suite of
their own (the factories as its conftest.py), run in pytester, with the outcomes the page
shows (the checkout suite passes; the deposit and the stock examples, buggy as written,
each fail naming the order that broke)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab.servers import Servers
from tests.test_pytest_plugin import _external

pytest_plugins = ["pytester"]

PAGE = Path(__file__).resolve().parents[1] / "docs" / "pytest.md"


def _examples() -> list[str]:
    """The page's ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


def test_the_page_has_its_four_examples() -> None:
    """The factories, the checkout suite, functions unchanged, interleavings: in that order."""
    blocks = _examples()
    assert len(blocks) == 4
    assert "servers_fixture" in blocks[0] and "test_last_item_sold_once" in blocks[1]
    assert "explore_functions" in blocks[2] and "locklab_interleavings" in blocks[3]


def test_every_example_runs_as_written(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, servers: Servers
) -> None:
    """The four blocks as a user would paste them: two checkout tests pass, the buggy
    deposit and the buggy stock read each fail with the broken order, as the page shows."""
    _external(monkeypatch, servers)
    factories, checkout, deposit, stock = _examples()
    pytester.makeconftest(factories)
    pytester.makepyfile(test_checkout=checkout, test_deposit=deposit, test_stock=stock)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: broke in * orders*",
            "*step a1: SELECT balance FROM accounts WHERE id = 1",
            "*AssertionError: the invariant broke in 12 of 14 interleavings*",
        ]
    )
