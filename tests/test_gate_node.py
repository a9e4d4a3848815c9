"""The documents' own node-postgres code (examples/node), unchanged, explored through the
gate: the read-compute-write deposit loses one in some orders and its FOR UPDATE version
in none; the cart-order checkout deadlocks in some order. `make test` installs the
examples from their package-lock.json; without node or npm these skip."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab.gate.actors import Actor
from lab.gate.explore import explore
from lab.servers import Servers

NODE_EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "node"
pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
    pytest.mark.skipif(
        not (NODE_EXAMPLES / "node_modules" / "pg").is_dir(),
        reason="examples/node is not installed (make examples: npm ci)",
    ),
]
SETUP = (NODE_EXAMPLES / "setup.sql").read_text()
DEPOSITS_KEPT = (NODE_EXAMPLES / "deposits-kept.sql").read_text()


def actors(*commands: str) -> list[Actor]:
    return [Actor(i, c) for i, c in enumerate(commands, 1)]


async def test_node_postgres_deposit_loses_one_and_the_locked_one_never(servers: Servers) -> None:
    """The node-postgres deposit loses an update in 4 of 6 orders; FOR UPDATE keeps all 6."""
    assert servers.pg is not None
    dsn = servers.pg.dsn
    buggy = actors("node deposit.js 10", "node deposit.js 10")
    found = await explore(dsn, buggy, SETUP, DEPOSITS_KEPT, cwd=NODE_EXAMPLES)
    assert found.complete and len(found.orders) == 6
    assert found.outcomes == {"broke a1=0 a2=0": 4, "kept a1=0 a2=0": 2}
    assert found.broke[0].run.transcript[:2] == [
        "step a1: SELECT balance FROM accounts WHERE id = $1  -- ('1')",
        "step a2: SELECT balance FROM accounts WHERE id = $1  -- ('1')",
    ]
    fixed = actors("node deposit.js --locked 10", "node deposit.js --locked 10")
    kept = await explore(dsn, fixed, SETUP, DEPOSITS_KEPT, cwd=NODE_EXAMPLES)
    assert kept.complete and kept.broke == [] and len(kept.orders) == 6


async def test_node_postgres_checkout_in_cart_order_deadlocks(servers: Servers) -> None:
    """The first broken order of two carts in opposite orders is a 40P01 (the helper's
    retries set to 1 try, so the deadlock is the actor's exit)."""
    assert servers.pg is not None
    carts = actors("node checkout.js 101 202", "node checkout.js 202 101")
    found = await explore(
        servers.pg.dsn, carts, SETUP, "SELECT true", first=True, cwd=NODE_EXAMPLES
    )
    assert len(found.broke) == 1 and "40P01" in found.broke[0].outcome()
    assert any("deadlock detected" in line for line in found.broke[0].run.transcript)
