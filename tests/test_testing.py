"""The plugin's interleaving helpers (lab/testing.py), run the way a user runs them: a small
suite of their own, in pytester, once with the buggy checkout and once with the fixed one."""

from __future__ import annotations

import pytest

from lab.servers import Servers
from tests.test_pytest_plugin import _external

pytest_plugins = ["pytester"]

USER_SUITE = """
import asyncio

from lab.core.steps import Session
from lab.testing import every_interleaving

READ = "SELECT qty FROM stock WHERE sku = 'A-1'" + ({lock!r})
STEPS = ("read", "take", "commit")


async def setup(db):
    await db.execute("CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL)")
    await db.execute("INSERT INTO stock VALUES ('A-1', 1)")


async def buyer(s: Session) -> str:
    async with s.transaction():
        qty = await s.fetchval("read", READ)
        if qty < 1:
            return "out_of_stock"
        await s.execute("take", "UPDATE stock SET qty = qty - 1 WHERE sku = 'A-1'")
    return "ok"


async def stock_never_negative(db, outcomes):
    qty = await db.fetchval("SELECT qty FROM stock")
    assert qty >= 0, f"stock {{qty}} after {{outcomes}}"


def test_stock_never_below_zero(locklab_interleavings):
    runs = asyncio.run(locklab_interleavings.every(
        setup, {{"s1": buyer, "s2": buyer}}, {{"s1": STEPS, "s2": STEPS}}, stock_never_negative))
    runs.assert_kept()
    assert runs.ran  # something ran: a test that cannot fail is no test


def test_one_schedule(locklab_pg_dsn):
    from lab.testing import run_schedule

    res = asyncio.run(run_schedule(locklab_pg_dsn, setup, {{"s1": buyer, "s2": buyer}},
        ["s1 read", "s1 take", "s1 commit", "s2 read", "s2 take", "s2 commit"],
        stock_never_negative))
    assert res.kept and res.outcomes == {{"s1": "ok", "s2": "out_of_stock"}}, res.transcript
"""


def _suite(pytester: pytest.Pytester, lock: str) -> pytest.RunResult:
    pytester.makepyfile(test_checkout=USER_SUITE.format(lock=lock))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider")


def test_fixed_code_passes_for_every_interleaving(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, servers: Servers
) -> None:
    """FOR UPDATE: no interleaving of two buyers takes the stock below zero."""
    _external(monkeypatch, servers)
    result = _suite(pytester, " FOR UPDATE")
    result.assert_outcomes(passed=2)


def test_buggy_code_fails_naming_the_breaking_interleaving(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, servers: Servers
) -> None:
    """A plain read: the every-interleaving test fails, its message names the first order
    that broke the invariant and prints its transcript; the serial schedule still passes."""
    _external(monkeypatch, servers)
    result = _suite(pytester, "")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: the invariant broke in 12 of 14 interleavings (kept 2/14, broke 12 "
            "(invalid 6 of 20)); first: s1 read, s1 take, s2 read, s1 commit, s2 take, s2 commit: "
            "stock_never_negative: stock -1 after {'s1': 'ok', 's2': 'ok'}*",
            "*s2 read    SELECT qty FROM stock WHERE sku = 'A-1' * -> qty=1",
            "*invariant  stock_never_negative: stock -1 after*BROKEN",
        ]
    )
