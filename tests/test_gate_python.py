"""The lost update in psycopg 3 and in the SQLAlchemy 2 ORM, as their users write them
(examples/python), explored unchanged through the gate: as commands (`locklab explore
--actor`) and as Python functions calling the examples' `main(dsn)` (explore_functions).
Each buggy deposit breaks, each --locked one keeps every order run.

psycopg's deposit is four steps (BEGIN, SELECT, UPDATE, COMMIT): 10 orders, 6 with FOR
UPDATE, as psql's locked deposit. SQLAlchemy's engine sends nine statements of its own at
its first connect, in a transaction it rolls back (BEGIN, version(), current_schema(),
two SHOWs, SAVEPOINT, a pg_type read for hstore, RELEASE, ROLLBACK). They are steps, but
they add no order: that transaction wrote nothing, so its ROLLBACK commutes by the lock
it lets go of (lab/pinned/footprint.py), and each actor's last COMMIT, which wrote,
moves past the other's read committed statements on other tables (lab/gate/commits.py).
So the ORM's locked deposits run psycopg's 6 orders."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lab.servers import Servers
from lab.testing import assert_kept, explore_functions

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "python"
SETUP = (EXAMPLES / "setup.sql").read_text()
DEPOSITS_KEPT = (EXAMPLES / "deposits-kept.sql").read_text()
PSYCOPG_ORDERS, PSYCOPG_LOCKED_ORDERS = 10, 6  # measured; psql's deposit-locked.sql: 6 too


def _example(name: str) -> ModuleType:
    """An example program as a module (examples/ is no package), its `main` not run."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # SQLAlchemy reads Mapped[...] annotations in the module
    spec.loader.exec_module(module)
    return module


PSYCOPG = _example("lost_update_psycopg")
SQLALCHEMY = _example("lost_update_sqlalchemy")


def psycopg_deposit(dsn: str) -> None:
    """The psycopg example's deposit of 10, read-compute-write."""
    PSYCOPG.main(dsn)


def psycopg_deposit_locked(dsn: str) -> None:
    """The psycopg example's deposit of 10, its read FOR UPDATE."""
    PSYCOPG.main(dsn, locked=True)


def sqlalchemy_deposit(dsn: str) -> None:
    """The SQLAlchemy example's deposit of 10: load the Account, add, commit."""
    SQLALCHEMY.main(dsn)


def sqlalchemy_deposit_locked(dsn: str) -> None:
    """The SQLAlchemy example's deposit of 10, loaded .with_for_update()."""
    SQLALCHEMY.main(dsn, locked=True)


def _explore(servers: Servers, script: str, *options: str) -> dict[str, Any]:
    """`locklab explore --json` with two actors running `script` (with its arguments,
    by this interpreter) from examples/python; its JSON, the counts printed."""
    assert servers.pg is not None
    actor = f"{sys.executable} {script}"
    command = [sys.executable, "-m", "lab.cli", "explore", "--actor", actor, "--actor", actor]
    command += ["--setup", "setup.sql", "--invariant", "deposits-kept.sql", "--json", *options]
    env = {**os.environ, "LOCKLAB_PG_DSN": servers.pg.dsn}
    done = subprocess.run(
        command, cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    print(f"{script} {' '.join(options)}: {data['orders']} orders, {data['outcomes']}")
    return data


def test_psycopg_deposit_loses_one_and_the_locked_one_never(servers: Servers) -> None:
    """psycopg's deposits as commands: 8 of 10 orders lose one (both SELECTs before either
    UPDATE); with FOR UPDATE all 6 keep both."""
    buggy = _explore(servers, "lost_update_psycopg.py")
    assert buggy["complete"] and (buggy["orders"], buggy["broke"]) == (PSYCOPG_ORDERS, 8)
    assert buggy["first_broken"]["transcript"][2:4] == [
        "step a1: SELECT balance FROM accounts WHERE id = $1  -- ('1')",
        "step a2: SELECT balance FROM accounts WHERE id = $1  -- ('1')",
    ]
    fixed = _explore(servers, "lost_update_psycopg.py --locked")
    assert fixed["complete"] and fixed["orders"] == PSYCOPG_LOCKED_ORDERS
    assert fixed["outcomes"] == {"kept a1=0 a2=0": PSYCOPG_LOCKED_ORDERS}


def test_sqlalchemy_deposit_loses_one_and_the_locked_one_keeps(
    servers: Servers, sqlalchemy_locked: dict[str, Any]
) -> None:
    """The ORM's deposits as commands: the first order loses one, both sessions having
    loaded the Account before either flushed; .with_for_update() keeps each of psycopg's
    count of orders (every order: the function actors' test, in one process)."""
    buggy = _explore(servers, "lost_update_sqlalchemy.py", "--first")
    assert buggy["orders"] == 1 and buggy["broke"] == 1
    lines = buggy["first_broken"]["transcript"]
    loads = [n for n, line in enumerate(lines) if "FROM accounts" in line]
    flushes = [n for n, line in enumerate(lines) if "UPDATE accounts" in line]
    assert len(loads) == 2 and max(loads) < min(flushes)
    fixed = sqlalchemy_locked
    assert fixed["orders"] == PSYCOPG_LOCKED_ORDERS and fixed["broke"] == 0


@pytest.fixture(scope="module")
def sqlalchemy_locked(servers: Servers) -> dict[str, Any]:
    """The ORM's locked deposits as commands, at most one order more than psycopg's take
    in all (--max stops before a search that would prune what is left says it is
    complete); run once for the two tests that read it: each order starts two Pythons
    that import SQLAlchemy."""
    return _explore(
        servers, "lost_update_sqlalchemy.py --locked", "--max", str(PSYCOPG_LOCKED_ORDERS + 1)
    )


def test_sqlalchemy_connect_statements_do_not_multiply_the_orders(
    sqlalchemy_locked: dict[str, Any],
) -> None:
    """The ORM's locked deposit explores every order within psycopg's count: the ORM's
    own statements at connect add no order."""
    fixed = sqlalchemy_locked
    assert fixed["complete"] and fixed["broke"] == 0


async def test_psycopg_functions_lose_a_deposit_and_locked_ones_keep_all(
    servers: Servers,
) -> None:
    """The psycopg example's main(dsn) as function actors: the first broken order names
    the lost write; FOR UPDATE keeps every order."""
    assert servers.pg is not None
    dsn = servers.pg.dsn
    found = await explore_functions(dsn, [psycopg_deposit] * 2, SETUP, DEPOSITS_KEPT)
    assert found.stopped.startswith("--first") and len(found.broke) == 1
    with pytest.raises(AssertionError, match=r"UPDATE accounts SET balance = \$1"):
        assert_kept(found)
    locked = [psycopg_deposit_locked] * 2
    kept = await explore_functions(dsn, locked, SETUP, DEPOSITS_KEPT, first=False)
    assert kept.complete and len(kept.orders) == PSYCOPG_LOCKED_ORDERS
    assert_kept(kept)


async def test_sqlalchemy_functions_lose_a_deposit_and_locked_ones_keep(
    servers: Servers,
) -> None:
    """The SQLAlchemy example's main(dsn) as function actors (the DSN's passfile goes to
    psycopg as a connect argument): the first broken order loses a deposit; loaded
    .with_for_update(), every order keeps both."""
    assert servers.pg is not None
    dsn = servers.pg.dsn
    found = await explore_functions(dsn, [sqlalchemy_deposit] * 2, SETUP, DEPOSITS_KEPT)
    assert found.stopped.startswith("--first") and len(found.broke) == 1
    assert found.broke[0].invariant == "False"
    locked = [sqlalchemy_deposit_locked] * 2
    kept = await explore_functions(dsn, locked, SETUP, DEPOSITS_KEPT, first=False)
    assert kept.complete and len(kept.orders) == PSYCOPG_LOCKED_ORDERS  # none of the connect's
    assert any("FOR UPDATE" in line for line in kept.orders[0].run.transcript)
    assert_kept(kept)
