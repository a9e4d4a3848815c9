"""Fewer orders, none missed: the footprint rules (lab/gate/reduce.py), the sleep-set
search against full enumeration on modelled actors (no server), and the same comparison
on real psql actors through the gate."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Sequence
from pathlib import Path

import asyncpg
import pytest

from lab.gate.actors import Actor
from lab.gate.commits import ends_alone, fresh, names_isolation, ruled_out, starts_named
from lab.gate.explore import explore
from lab.gate.proxy import Group, Session
from lab.gate.reduce import Redundant, SleepSets
from lab.gate.wire import Statement
from lab.pinned.footprint import Footprint, Look, footprint
from lab.servers import Servers
from tests.conftest import throwaway_database

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "psql"
PSQL = shutil.which("psql")

T = ("relation:1", "RowExclusiveLock")
T_READ = ("relation:1", "AccessShareLock")
U = ("relation:2", "RowExclusiveLock")


def test_the_footprint_reads_the_server_and_says_when_it_cannot() -> None:
    """Locks give reads and writes; a step that ends its transaction, runs outside one,
    begins a new one after one, or begins one after a write that committed on its own
    commutes with nothing; a step that ran nothing touches nothing."""
    in_tx = ("T", "T")
    reading = footprint(1, Look(), Look(frozenset({T_READ})), in_tx)
    assert reading.reads == {"relation:1"} and not reading.writes
    writing = footprint(1, Look(frozenset({T_READ})), Look(frozenset({T_READ, T})), in_tx)
    assert writing.writes == {"relation:1"} and not writing.reads
    commit = footprint(1, Look(frozenset({T})), Look(), ("T", "I"))
    assert commit.everything == "ended its transaction"
    ran = footprint(1, Look(state_change="1"), Look(state_change="2"), ("I", "I"))
    assert ran.everything == "ran outside a transaction"
    assert footprint(1, Look(state_change="1"), Look(state_change="1"), ("I", "I")) == Footprint(1)
    again = footprint(1, Look(xact_start="1"), Look(xact_start="2"), in_tx)
    assert again.everything == "ended its transaction and began another"
    begun = ("I", "T")
    assert footprint(1, Look(next_xid="9"), Look(next_xid="9"), begun) == Footprint(1)  # BEGIN
    # an UPDATE outside a transaction, then BEGIN: its id was given out and its
    # transaction ended (the next id moved), and its locks are gone
    hidden = footprint(1, Look(next_xid="9"), Look(next_xid="10"), begun)
    assert hidden.everything == "ran outside a transaction and began one"
    assert footprint(1, Look(), Look(), begun).everything  # the next id was not read


def test_a_transaction_that_wrote_nothing_ends_by_the_locks_it_lets_go_of() -> None:
    """The end of a transaction with no id, none given out meanwhile and no serializable
    read touches only the locks it held; with an id, an id given out during the step (one
    query that wrote and committed), an SIReadLock or an unread next id, it touches all."""
    ended = ("T", "I")
    read_only = footprint(1, Look(frozenset({T_READ}), next_xid="9"), Look(next_xid="9"), ended)
    assert read_only == Footprint(1, reads=frozenset({"relation:1"}))
    assert read_only.commutes_with(Footprint(2, writes=frozenset({"relation:2"})))
    assert not read_only.commutes_with(Footprint(2, writes=frozenset({"relation:1"})))
    wrote = Look(frozenset({T}), xid="8", next_xid="9")
    assert footprint(1, wrote, Look(next_xid="9"), ended).everything == "ended its transaction"
    given = footprint(1, Look(next_xid="9"), Look(next_xid="10"), ended)
    assert given.everything == "ended its transaction"
    siread = Look(frozenset({("relation:1", "SIReadLock")}), next_xid="9")
    assert footprint(1, siread, Look(next_xid="9"), ended).everything
    assert footprint(1, Look(), Look(), ended).everything  # the next id was not read


def test_a_vouched_commit_moves_past_fresh_steps_on_other_tables_only() -> None:
    """The end of a transaction that wrote, vouched for by the gate (lab/gate/commits.py),
    keeps the locks it let go of: it commutes with a read committed step on another
    table, not with one on its own table, not with a step whose snapshot may outlive it,
    and never when it held a serializable read."""
    ended, wrote = ("T", "I"), Look(frozenset({T}), xid="8", next_xid="9")
    commit = footprint(1, wrote, Look(next_xid="9"), ended, fresh=True)
    assert commit.ended and commit.writes == {"relation:1"} and not commit.everything
    other = Footprint(2, reads=frozenset({"relation:2"}), fresh=True)
    assert commit.commutes_with(other) and other.commutes_with(commit)
    assert not commit.commutes_with(Footprint(2, reads=frozenset({"relation:1"}), fresh=True))
    assert not commit.commutes_with(Footprint(2, reads=frozenset({"relation:2"})))
    siread = Look(frozenset({T, ("relation:2", "SIReadLock")}), xid="8", next_xid="9")
    assert footprint(1, siread, Look(next_xid="9"), ended, fresh=True).everything


def test_the_gate_vouches_from_what_the_session_sent() -> None:
    """A COMMIT alone ends; a step inside its transaction (or begun by its BEGIN) shows
    all it read, one that undid a savepoint, declared a cursor or ran outside a
    transaction does not; naming an isolation level or NOTIFY, in a statement or at
    startup, takes the session out of the rule, a SHOW of it does not."""
    session = Session(1, ("127.0.0.1", 1), {"user": "u", "database": "d"})

    def group(*sql: str) -> Group:
        return Group(statements=[Statement(text) for text in sql])

    assert ends_alone(group("commit;")) and fresh(group("COMMIT"), ("T", "I"))
    assert not ends_alone(group("UPDATE t SET v = 1", "COMMIT"))
    assert not fresh(group("UPDATE t SET v = 1", "COMMIT"), ("T", "I"))
    assert fresh(group("SELECT 1 FROM t"), ("T", "T"))
    assert fresh(group("BEGIN", "SELECT 1 FROM t"), ("I", "T"))
    assert not fresh(group("SELECT 1 FROM t", "BEGIN"), ("I", "T"))
    assert not fresh(group("ROLLBACK TO SAVEPOINT s"), ("T", "T"))
    assert not fresh(group("DECLARE c CURSOR FOR SELECT 1 FROM t"), ("T", "T"))
    assert not names_isolation(group("show transaction isolation level").statements)
    assert names_isolation(group("BEGIN ISOLATION LEVEL REPEATABLE READ").statements)
    assert names_isolation(group("SELECT pg_notify('jobs', '1')").statements)
    options = Session(
        2, ("127.0.0.1", 2), {"options": "-c default_transaction_isolation=serializable"}
    )
    assert starts_named(options) and not starts_named(session)


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        (
            "CREATE TABLE p (id int PRIMARY KEY); CREATE TABLE c (p int REFERENCES p "
            "DEFERRABLE INITIALLY DEFERRED)",
            "deferred to the commit",
        ),
        ("ALTER DATABASE {db} SET default_transaction_isolation = 'serializable'", "setting"),
        (
            "CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS "
            "$$BEGIN PERFORM 1; EXCEPTION WHEN others THEN NULL; END$$",
            "catches errors",
        ),
        ("CREATE TABLE plain (id int PRIMARY KEY)", ""),
    ],
)
async def test_the_database_can_rule_the_commit_rule_out(
    servers: Servers, sql: str, why: str
) -> None:
    """A deferred constraint, an isolation set on the database, a function that catches
    an exception rule commits moving out; a plain table does not."""
    async with throwaway_database(servers, "locklab_commits") as name:
        conn = await asyncpg.connect(servers.pg.dsn if servers.pg else "", database=name)
        try:
            await conn.execute(sql.format(db=name))
            said = await ruled_out(conn)
        finally:
            await conn.close()
    assert (why in said and said != "") if why else said == ""


def test_commuting_needs_two_actors_and_no_write_on_a_shared_object() -> None:
    """Reads of one table commute; a write and a read of it do not; nor do two statements
    of one actor, nor anything with a statement that commutes with nothing."""
    read1 = Footprint(1, reads=frozenset({"relation:1"}))
    read2 = Footprint(2, reads=frozenset({"relation:1"}))
    write2 = Footprint(2, writes=frozenset({"relation:1"}))
    other2 = Footprint(2, writes=frozenset({"relation:2"}))
    assert read1.commutes_with(read2) and read1.commutes_with(other2)
    assert not read1.commutes_with(write2) and not write2.commutes_with(read1)
    assert not read1.commutes_with(Footprint(1))
    assert not read1.commutes_with(Footprint(2, everything="ran outside a transaction"))


# --- modelled actors: each statement's footprint is fixed, no server needed ---------------


def _search(program: Sequence[Sequence[Footprint]]) -> list[tuple[str, ...]]:
    """Run SleepSets over modelled actors as explore runs real ones: the orders it ran."""
    search = SleepSets()
    ran: list[tuple[str, ...]] = []
    prefix: list[int] | None = []
    while prefix is not None:
        choose = search.chooser(prefix)
        at = [0] * len(program)
        order: list[str] = []
        steps: list[Footprint] = []
        try:
            while any(a < len(s) for a, s in zip(at, program, strict=True)):
                live = [i for i, s in enumerate(program) if at[i] < len(s)]
                labels = [f"a{i + 1}.{at[i]}" for i in live]
                k = choose(len(steps), labels, [program[i][0].actor for i in live], steps)
                actor = live[k]
                order.append(labels[k])
                steps.append(program[actor][at[actor]])
                at[actor] += 1
            search.finished(steps)
            ran.append(tuple(order))
        except Redundant:
            pass
        prefix = search.next_prefix()
    return ran


def _every_order(program: Sequence[Sequence[Footprint]]) -> list[tuple[str, ...]]:
    slots = [i for i, s in enumerate(program) for _ in s]
    orders = set()
    for perm in itertools.permutations(slots):
        at = [0] * len(program)
        order = []
        for i in perm:
            order.append(f"a{i + 1}.{at[i]}")
            at[i] += 1
        orders.add(tuple(order))
    return sorted(orders)


def _normal(order: tuple[str, ...], prints: dict[str, Footprint]) -> tuple[str, ...]:
    """The least order (by label) among those equivalent to `order` by swaps of
    neighbours that commute: equal for two orders exactly when they are equivalent."""
    left = list(order)
    out: list[str] = []
    while left:
        free = [
            k
            for k, x in enumerate(left)
            if all(prints[y].commutes_with(prints[x]) for y in left[:k])
        ]
        k = min(free, key=lambda k: left[k])
        out.append(left.pop(k))
    return tuple(out)


def _prints(program: Sequence[Sequence[Footprint]]) -> dict[str, Footprint]:
    return {f"a{i + 1}.{j}": f for i, s in enumerate(program) for j, f in enumerate(s)}


BEGIN = [Footprint(0)]
CART = [  # BEGIN, two updates of one table, COMMIT
    Footprint(0),
    Footprint(0, writes=frozenset({"t"})),
    Footprint(0, writes=frozenset({"t"})),
    Footprint(0, writes=frozenset({"t"})),
]
READER = [Footprint(0), Footprint(0, reads=frozenset({"t"})), Footprint(0, writes=frozenset({"t"}))]
ELSEWHERE = [
    Footprint(0),
    Footprint(0, writes=frozenset({"u"})),
    Footprint(0, writes=frozenset({"u"})),
]


def _as(actor: int, steps: Sequence[Footprint]) -> list[Footprint]:
    return [Footprint(actor, f.reads, f.writes, f.everything) for f in steps]


@pytest.mark.parametrize(
    ("shape", "program"),
    [
        ("two carts", [_as(1, CART), _as(2, CART)]),
        ("a reader beside a cart", [_as(1, READER), _as(2, CART)]),
        ("disjoint tables", [_as(1, CART), _as(2, ELSEWHERE)]),
        ("three actors", [_as(1, READER), _as(2, READER), _as(3, ELSEWHERE)]),
    ],
)
def test_sleep_sets_run_one_order_of_each_class_and_miss_none(
    shape: str, program: list[list[Footprint]]
) -> None:
    """Against every order: each equivalence class of orders is run exactly once."""
    prints = _prints(program)
    classes = {_normal(o, prints) for o in _every_order(program)}
    ran = [_normal(o, prints) for o in _search(program)]
    assert set(ran) == classes, shape
    assert len(ran) == len(classes), f"{shape}: a class ran twice"


def test_the_comparison_can_fail() -> None:
    """A search that ran only the first order of two carts misses classes: the check sees it."""
    program = [_as(1, CART), _as(2, CART)]
    prints = _prints(program)
    classes = {_normal(o, prints) for o in _every_order(program)}
    assert {_normal(_every_order(program)[0], prints)} != classes
    assert len(classes) > 1


# --- real actors through the gate ---------------------------------------------------------


def _psql(path: Path) -> str:
    return f"psql -X -q -v ON_ERROR_STOP=1 -f {path}"


@pytest.mark.skipif(PSQL is None, reason="psql is not installed")
async def test_reduced_explore_finds_every_outcome_of_the_full_one_in_fewer_orders(
    servers: Servers,
) -> None:
    """Opposite carts: the reduced explore finds the same outcome classes (a 40P01 to
    either cart, both kept) as every order does, in fewer orders."""
    assert servers.pg is not None
    setup = (EXAMPLES / "setup.sql").read_text()
    carts = [Actor(1, _psql(EXAMPLES / "cart-1-2.sql")), Actor(2, _psql(EXAMPLES / "cart-2-1.sql"))]
    full = await explore(servers.pg.dsn, carts, setup, "SELECT true", all_orders=True)
    reduced = await explore(servers.pg.dsn, carts, setup, "SELECT true")
    assert full.complete and reduced.complete
    assert set(reduced.outcomes) == set(full.outcomes) and len(set(full.outcomes)) == 3
    assert len(reduced.orders) < len(full.orders)
    assert reduced.as_json()["reduction"] == "sleep sets"


@pytest.mark.skipif(PSQL is None, reason="psql is not installed")
async def test_max_says_what_it_left_and_a_switch_comes_first(servers: Servers) -> None:
    """--max stops after N orders and says how many more there are at least; the search
    tries another actor's statement first, so the very first deposits order races."""
    assert servers.pg is not None
    setup = (EXAMPLES / "setup.sql").read_text()
    kept = (EXAMPLES / "deposits-kept.sql").read_text()
    carts = [Actor(1, _psql(EXAMPLES / "cart-1-2.sql")), Actor(2, _psql(EXAMPLES / "cart-2-1.sql"))]
    every = await explore(
        servers.pg.dsn, carts, setup, "SELECT true", max_orders=3, all_orders=True
    )
    assert len(every.orders) == 3 and not every.complete
    least = int(every.stopped.split("at least ")[1].split()[0])
    assert 3 < least <= 30, every.stopped  # 30 orders in all (docs/gate.md)
    reduced = await explore(servers.pg.dsn, carts, setup, "SELECT true", max_orders=3)
    assert "statements not yet tried" in reduced.stopped
    deposits = [Actor(n, _psql(EXAMPLES / "deposit.sql")) for n in (1, 2)]
    first = await explore(servers.pg.dsn, deposits, setup, kept, first=True)
    assert len(first.orders) == 1 and first.orders[0].run.schedule == [1, 2, 1, 2]


READER_SETUP = """
CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts VALUES (1, 100);
CREATE TABLE other (id int);
CREATE TABLE seen (balance int);
"""
WRITER_SQL = "BEGIN;\nUPDATE accounts SET balance = 110 WHERE id = 1;\nCOMMIT;\n"
READER_SQL = (
    "{begin};\nSELECT count(*) FROM other;\n"
    "INSERT INTO seen SELECT balance FROM accounts;\nCOMMIT;\n"
)


@pytest.mark.skipif(PSQL is None, reason="psql is not installed")
@pytest.mark.parametrize("begin", ["BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ"])
async def test_a_commit_moves_past_a_read_committed_read_never_a_snapshot(
    servers: Servers, tmp_path: Path, begin: str
) -> None:
    """A writer's COMMIT against a reader whose first statement reads another table: read
    committed, the commit moves past that read (fewer orders) and both balances are
    still seen; under REPEATABLE READ that read fixes the snapshot, the commit stays
    in place, and the reduced search again finds both (as every order does)."""
    assert servers.pg is not None
    (tmp_path / "writer.sql").write_text(WRITER_SQL)
    (tmp_path / "reader.sql").write_text(READER_SQL.format(begin=begin))
    pair = [Actor(1, _psql(tmp_path / "writer.sql")), Actor(2, _psql(tmp_path / "reader.sql"))]
    saw_old = "SELECT (SELECT balance FROM seen) = 100"
    full = await explore(servers.pg.dsn, pair, READER_SETUP, saw_old, all_orders=True)
    reduced = await explore(servers.pg.dsn, pair, READER_SETUP, saw_old)
    assert full.complete and reduced.complete
    assert set(reduced.outcomes) == set(full.outcomes) == {"broke a1=0 a2=0", "kept a1=0 a2=0"}
    assert len(reduced.orders) < len(full.orders)
