"""The four psycopg bugs docs/frontrun.md sets beside frontrun (examples/python): the
deadlock, the phantom overbooking and the SELECT-then-INSERT upsert (the lost update has
tests/test_gate_python.py), each as the very commands examples/python/compare_frontrun.py
runs. Each buggy pair breaks in the first order explored, as the page's table says; each
fix keeps every order. frontrun itself is no dependency of the lab and is not run here:
`make compare-frontrun` installs it into a throwaway venv and needs the package index."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lab.gate.actors import Actor
from lab.gate.explore import Exploration, explore
from lab.servers import Servers

pytest.importorskip("psycopg", reason="the examples are psycopg 3 programs (the dev extra)")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "python"


def _compare() -> ModuleType:
    """compare_frontrun.py as a module, for its BUGS (its main not run)."""
    spec = importlib.util.spec_from_file_location(
        "compare_frontrun", EXAMPLES / "compare_frontrun.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_frontrun"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


BUGS: dict[str, Any] = {bug.slug: bug for bug in _compare().BUGS}
FIXES = {"deadlock": "--sorted", "overbooking": "--locked", "upsert": "--on-conflict"}


async def _explore(servers: Servers, bug: Any, option: str = "", first: bool = True) -> Exploration:
    """The bug's two actors (each with `option`) explored on its setup and invariant."""
    assert servers.pg is not None
    options = [option] if option else []
    actors = [Actor(n, a.command(*options)) for n, a in enumerate(bug.actors, 1)]
    setup = (EXAMPLES / bug.setup).read_text()
    invariant = (EXAMPLES / bug.invariant).read_text()
    found = await explore(servers.pg.dsn, actors, setup, invariant, first=first, cwd=EXAMPLES)
    print(f"{bug.name} {option}: {len(found.orders)} orders, {dict(found.outcomes)}")
    return found


def test_the_four_bugs_name_their_files() -> None:
    """The comparison's four bugs, each with a setup, an invariant and two actors whose
    programs are in examples/python."""
    assert sorted(BUGS) == ["deadlock", "overbooking", "update", "upsert"]
    for bug in BUGS.values():
        assert (EXAMPLES / bug.setup).read_text().strip()
        assert "SELECT" in (EXAMPLES / bug.invariant).read_text()
        assert all((EXAMPLES / f"{a.module}.py").is_file() for a in bug.actors)


@pytest.mark.parametrize("slug", sorted(FIXES))
async def test_each_bug_breaks_in_its_first_order(servers: Servers, slug: str) -> None:
    """The buggy pair breaks in the first order explored: a 40P01 for one transfer, two
    bookings of a room for one, a 23505 for one get-or-create."""
    found = await _explore(servers, BUGS[slug])
    assert len(found.orders) == 1 and len(found.broke) == 1
    outcome = found.broke[0].outcome()
    expected = {"deadlock": ":40P01", "overbooking": "a1=0 a2=0", "upsert": ":23505"}[slug]
    assert expected in outcome, outcome


@pytest.mark.parametrize("slug", sorted(FIXES))
async def test_each_fix_keeps_every_order(servers: Servers, slug: str) -> None:
    """With the fix (rows in id order, the room read FOR UPDATE, ON CONFLICT DO NOTHING)
    every order explored keeps the invariant and every actor exits 0."""
    found = await _explore(servers, BUGS[slug], FIXES[slug], first=False)
    assert found.complete and found.orders and not found.broke, dict(found.outcomes)
