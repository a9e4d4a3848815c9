"""Unchanged programs explored through the gate: psql scripts as actors, every order of
their statements on a fresh copy of the setup, judged by an SQL invariant and by how each
actor exited. The scripts are the ones in examples/psql/."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.gate.actors import Actor
from lab.gate.explore import Diverged, explore, replay, trace
from lab.gate.order import Decision
from lab.gate.spec import export
from lab.servers import Servers
from lab.servers.base import with_database
from lab.spec.parse import parse_spec
from tests.conftest import throwaway_database

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "psql"
PSQL = shutil.which("psql")
pytestmark = pytest.mark.skipif(PSQL is None, reason="psql is not installed")


def script(name: str) -> str:
    return f"psql -X -q -v ON_ERROR_STOP=1 -f {EXAMPLES / name}"


def actors(*names: str) -> list[Actor]:
    return [Actor(i, script(n)) for i, n in enumerate(names, 1)]


SETUP = (EXAMPLES / "setup.sql").read_text()
DEPOSITS_KEPT = (EXAMPLES / "deposits-kept.sql").read_text()


async def test_read_compute_write_loses_a_deposit_in_four_of_six_orders(servers: Servers) -> None:
    """Two statements each: 6 orders; the 4 where both reads come before both writes lose
    a deposit (the invariant reads false); the 2 that run one actor first keep it."""
    assert servers.pg is not None
    found = await explore(
        servers.pg.dsn, actors("deposit.sql", "deposit.sql"), SETUP, DEPOSITS_KEPT
    )
    assert found.complete and len(found.orders) == 6
    assert found.outcomes == {"broke a1=0 a2=0": 4, "kept a1=0 a2=0": 2}
    first = found.broke[0]
    assert first.run.transcript == [
        "step a1: SELECT balance FROM accounts WHERE id = 1",
        "step a2: SELECT balance FROM accounts WHERE id = 1",
        "step a1: UPDATE accounts SET balance = 100 + 10 WHERE id = 1;",
        "step a2: UPDATE accounts SET balance = 100 + 10 WHERE id = 1;",
    ]
    assert first.invariant == "False"


async def test_for_update_keeps_every_order(servers: Servers) -> None:
    """The same deposits with the read's row lock: the second reader waits (the gate sees
    it blocked and grants the other session's statements), and no order loses one."""
    assert servers.pg is not None
    pair = actors("deposit-locked.sql", "deposit-locked.sql")
    found = await explore(servers.pg.dsn, pair, SETUP, DEPOSITS_KEPT)
    assert found.complete and found.broke == []
    assert found.outcomes == {"kept a1=0 a2=0": len(found.orders)}
    waited = [o for o in found.orders if any("<waiting ...>" in line for line in o.run.transcript)]
    assert waited, "no order had a reader wait on the other's row lock"


async def test_opposite_orders_deadlock_in_some_orders_and_one_order_never(
    servers: Servers,
) -> None:
    """Two carts updating two rows in opposite orders: some orders end in a 40P01 for one
    of them (psql exits 3); the same two carts in one order never do."""
    assert servers.pg is not None
    found = await explore(
        servers.pg.dsn, actors("cart-1-2.sql", "cart-2-1.sql"), SETUP, "SELECT true"
    )
    assert found.complete
    deadlocked = {o for o in found.outcomes if "40P01" in o}
    assert deadlocked == {"broke a1=0 a2=3:40P01", "broke a1=3:40P01 a2=0"}
    assert found.outcomes["kept a1=0 a2=0"] > 0
    sorted_carts = await explore(
        servers.pg.dsn, actors("cart-1-2.sql", "cart-1-2.sql"), SETUP, "SELECT true"
    )
    assert sorted_carts.complete and sorted_carts.broke == []


async def test_trace_replays_a_broken_order_from_its_schedule(servers: Servers) -> None:
    """The first broken order's schedule, given to trace, runs that same order again."""
    assert servers.pg is not None
    pair = actors("cart-1-2.sql", "cart-2-1.sql")
    found = await explore(servers.pg.dsn, pair, SETUP, "SELECT true", first=True)
    assert found.stopped.startswith("--first") and found.broke == [found.orders[-1]]
    again = await trace(servers.pg.dsn, pair, SETUP, "SELECT true", found.orders[-1].run.schedule)
    assert again.run.transcript == found.orders[-1].run.transcript
    assert again.outcome() == found.orders[-1].outcome()


def test_the_command_prints_json_and_refuses_bad_input_in_one_line(
    servers: Servers, tmp_path: Path
) -> None:
    """`locklab explore --actor ... --json` from the examples folder; bad input: one line
    on stderr and exit 2, before any actor runs."""
    assert servers.pg is not None
    lab = [sys.executable, "-m", "lab.cli"]
    env = {**os.environ, "LOCKLAB_PG_DSN": servers.pg.dsn}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*lab, *args], cwd=EXAMPLES, env=env, capture_output=True, text=True, timeout=300
        )

    done = run(
        "explore",
        "--actor",
        "psql -X -q -v ON_ERROR_STOP=1 -f deposit.sql",
        "--actor",
        "psql -X -q -v ON_ERROR_STOP=1 -f deposit.sql",
        "--setup",
        "setup.sql",
        "--invariant",
        "deposits-kept.sql",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["orders"], data["kept"], data["broke"], data["complete"]) == (6, 2, 4, True)
    assert data["first_broken"]["schedule"] == [1, 2, 1, 2]
    for args, says in [
        (["explore", "--actor", "psql -f deposit.sql"], "at least two --actor"),
        (["explore", "lost-update", "--actor", "a", "--actor", "b"], "not a scenario"),
        (["explore", "--first"], "give a scenario"),
        (["explore", "lost-update", "--first"], "only with --actor"),
        (["trace", "--actor", "a", "--actor", "b", "--schedule", "1,3"], "numbered 1 to 2"),
        (["explore", "--actor", "no-such-program-here", "--actor", "b"], "cannot run"),
    ]:
        refused = run(*args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        lines = [line for line in refused.stderr.splitlines() if line.startswith("locklab:")]
        assert len(lines) == 1 and says in lines[0], (args, refused.stderr)


async def test_a_broken_order_becomes_a_one_minimal_spec(
    servers: Servers, tester: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """The first deadlocking order of the opposite carts, exported and shrunk: PostgreSQL's
    own isolationtester prints the deadlock on the spec, and on no spec with one step of
    its permutation dropped (each such run given 1 s before a blocked step is cancelled)."""
    assert servers.pg is not None
    dsn = servers.pg.dsn
    pair = actors("cart-1-2.sql", "cart-2-1.sql")
    # every order, depth first: the first deadlock is one cart's BEGIN and update, then
    # the other's (a switch-first search would give an interleaved one, slower to shrink)
    found = await explore(dsn, pair, SETUP, "SELECT true", first=True, all_orders=True)
    exported = await export(found.broke[0], SETUP, "SELECT true", dsn, 100)
    assert "ERROR:  deadlock detected" in exported.output
    (permutation,) = parse_spec(exported.text).permutations
    names = [p.name for p in permutation]
    # each cart's BEGIN and two updates; the COMMITs are not needed
    assert [n.split("_")[0] for n in names] == ["a1", "a1", "a2", "a2", "a1", "a2"]
    assert exported.dropped == len(found.broke[0].run.statements) - len(names)
    binary, env = tester

    async def isolationtester(text: str) -> str:
        async with throwaway_database(servers, "locklab_export", rows=0) as name:
            proc = await asyncio.create_subprocess_exec(
                str(binary),
                with_database(dsn, name),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env={**env, "PGISOLATIONTIMEOUT": "1", "PG_TEST_TIMEOUT_DEFAULT": "1"},
            )
            out, _ = await asyncio.wait_for(proc.communicate(text.encode()), 120)
        return out.decode()

    assert (await isolationtester(exported.text)) == exported.output
    for i in range(len(names)):
        fewer = " ".join(names[:i] + names[i + 1 :])
        output = await isolationtester(exported.text.replace(" ".join(names), fewer))
        assert "deadlock detected" not in output, names[i]


async def test_a_lost_update_spec_shows_the_invariant_read_false(servers: Servers) -> None:
    """A broken invariant's spec is the whole order (not shrunk: without a deposit the
    check would fail for another reason), its last step the check reading false."""
    assert servers.pg is not None
    dsn = servers.pg.dsn
    found = await explore(
        dsn, actors("deposit.sql", "deposit.sql"), SETUP, DEPOSITS_KEPT, first=True
    )
    exported = await export(found.broke[0], SETUP, DEPOSITS_KEPT, dsn, 100)
    assert exported.dropped == 0 and exported.steps == 4
    assert "step check: SELECT kept FROM" in exported.output
    assert exported.output.endswith("kept\n----\nf   \n(1 row)\n\n")


def test_explore_spec_writes_a_spec_that_trace_runs(servers: Servers, tmp_path: Path) -> None:
    """`explore --actor ... --spec F.spec` writes F.spec and F.out; `locklab trace F.spec`
    prints F.out again."""
    assert servers.pg is not None
    env = {**os.environ, "LOCKLAB_PG_DSN": servers.pg.dsn}
    spec = tmp_path / "lost.spec"
    deposit = "psql -X -q -v ON_ERROR_STOP=1 -f deposit.sql"
    args = ["explore", "--actor", deposit, "--actor", deposit, "--setup", "setup.sql"]
    args += ["--invariant", "deposits-kept.sql", "--spec", str(spec)]
    lab = [sys.executable, "-m", "lab.cli"]
    done = subprocess.run([*lab, *args], cwd=EXAMPLES, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"spec: {spec} (4 steps, the whole order: a broken invariant" in done.stdout
    traced = subprocess.run(
        [*lab, "trace", str(spec)], env=env, capture_output=True, text=True, timeout=300
    )
    assert traced.stdout == spec.with_suffix(".out").read_text()


# A deposit whose UPDATE carries a token of the clock: no two replays send the same text.
TAGGED = """SELECT balance, md5(clock_timestamp()::text) AS tag FROM accounts WHERE id = 1 \\gset
UPDATE accounts SET balance = :balance + 10 WHERE id = 1 AND :'tag' <> '';
"""


async def test_replays_that_diverge_are_named_then_sampled(
    servers: Servers, tmp_path: Path
) -> None:
    """An actor that sends another statement on a replay of the same prefix is named in
    one line, and explore goes on with sampled orders (PCT), counted as sampled, never
    as complete; the lost update is found among them. --exhaustive refuses instead."""
    assert servers.pg is not None
    tagged = tmp_path / "tagged.sql"
    tagged.write_text(TAGGED)
    pair = [Actor(i, f"psql -X -q -v ON_ERROR_STOP=1 -f {tagged}") for i in (1, 2)]
    found = await explore(servers.pg.dsn, pair, SETUP, DEPOSITS_KEPT, max_orders=8)
    said = "actor 1's statement 2 differs between replays: \"a1: UPDATE accounts SET balance"
    assert found.diverged.startswith(said) and found.diverged.endswith("the same in 3 replays")
    assert not found.complete and found.sampled == 8 - (len(found.orders) - found.sampled)
    assert found.stopped == f"sampled {found.sampled} orders (PCT, seed 1): not every order was run"
    assert {o.kept for o in found.orders[-found.sampled :]} == {True, False}
    assert found.as_json()["sampled"] == found.sampled
    with pytest.raises(LabError, match=r"^--exhaustive: actor 1's statement 2 differs"):
        await explore(servers.pg.dsn, pair, SETUP, DEPOSITS_KEPT, exhaustive=True)


def test_a_replay_that_holds_fewer_statements_names_the_actor_it_misses() -> None:
    """A replay whose prefix chose the second of two held statements, where this time
    only one is held (a procrastinate worker's pooled connection not yet at the gate),
    names the actor and which of its session's statements is missing, as a replay that
    holds other statements does; with no earlier order to compare, it counts them."""
    known = [["a1: BEGIN", "a2: BEGIN"], ["a1: COMMIT", "a2.3: SELECT 1"]]
    choose = replay([1, 1], known)
    assert choose(0, Decision(known[0], [1, 2]), []) == 1
    with pytest.raises(Diverged) as missed:
        choose(1, Decision(["a1: COMMIT"], [1]), [])
    assert str(missed.value) == (
        "actor 2's statement 1 differs between replays: 'nothing' where an earlier order "
        "held 'a2.3: SELECT 1'"
    )
    with pytest.raises(Diverged, match=r"^statement 1 differs between replays: 1 held"):
        replay([1])(0, Decision(["a1: BEGIN"], [1]), [])
