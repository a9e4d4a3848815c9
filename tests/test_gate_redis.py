"""The Redis gate: RESP read as a proxy reads it, commands as steps on a real Redis (a
MULTI block and a script are one), time as a step (a lease run out on the server's
clock), and the documents' DL-12 in node-redis, unchanged: GET-then-DEL deletes the next
holder's lock after its lease ran out; the compare-and-delete in Lua never does."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from lab.gate import resp
from lab.gate.actors import Actor
from lab.gate.explore import explore, trace
from lab.gate.proxy import Group, Session
from lab.gate.redisgate import RedisGate
from lab.gate.serve import serve
from lab.gate.workspace import RedisPlan
from lab.servers import Servers
from lab.servers.redisnodes import RedisNodes
from lab.testing import explore_functions

NODE_EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "node"
needs_node_redis = [
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
    pytest.mark.skipif(
        not (NODE_EXAMPLES / "node_modules" / "redis").is_dir(),
        reason="examples/node is not installed (make examples: npm ci)",
    ),
]


@pytest.fixture(scope="module")
def own_redis() -> Iterator[str]:
    """A Redis of these tests' own: explore empties it before every order."""
    nodes = RedisNodes.prepare(1)
    try:
        nodes.start()
        yield nodes.urls()[0]
    finally:
        nodes.close()


def actors(*commands: str) -> list[Actor]:
    return [Actor(i, c) for i, c in enumerate(commands, 1)]


async def read_all(data: bytes) -> list[list[bytes]]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    commands = []
    while not reader.at_eof():
        commands.append((await resp.read_command(reader))[0])
    return commands


async def test_commands_are_read_in_both_forms_and_replies_counted_across_chunks() -> None:
    """A multibulk command and an inline one are read as words; replies cut anywhere are
    counted whole, nested arrays and nulls included, and a RESP 3 push is no reply."""
    wire = b'*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na b\n\r\nGET "x y"\r\n'
    assert await read_all(wire) == [[b"SET", b"k", b"a b\n"], [b"GET", b"x y"]]
    stream = b"+OK\r\n$-1\r\n*2\r\n*1\r\n:1\r\n$3\r\nabc\r\n>2\r\n+a\r\n+b\r\n-ERR no\r\n%1\r\n+k\r\n_\r\n"
    replies = resp.Replies()
    forwarded = b"".join(replies.feed(stream[i : i + 3]) for i in range(0, len(stream), 3))
    assert forwarded == stream
    assert replies.replies == [b"+OK", b"$-1", b"*2", b"-ERR no", b"%1"]
    assert [resp.error_code(r) for r in replies.replies] == [None, None, None, "ERR", None]


class Recorder:
    """A keeper that lets every step go at once and keeps what each was."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.ends: list[list[str]] = []

    async def opened(self, session: Session) -> None:
        pass

    async def step(self, session: Session, group: Group) -> None:
        self.steps.append(group.shown())

    async def between(self, session: Session, group: Group) -> None:
        pass

    def ready(self, session: Session, errors: list[str]) -> None:
        self.ends.append(errors)

    def closed(self, session: Session) -> None:
        pass


async def test_a_block_and_a_script_are_one_step_and_the_connection_is_none(
    own_redis: str,
) -> None:
    """Through the gate, redis-py's transaction pipeline is one step shown as the block;
    PING, SELECT and CLIENT are no steps; an error reply ends its step with its code; the
    client needs no password (the gate logs in)."""
    where = aioredis.Redis.from_url(own_redis).connection_pool.connection_kwargs
    keeper = Recorder()
    gate = RedisGate("127.0.0.1", where["port"], where["password"], keeper)
    port = await gate.start(actor=1)
    client = aioredis.Redis(host="127.0.0.1", port=port)
    try:
        await client.ping()
        await client.execute_command("SELECT", 0)  # type: ignore[no-untyped-call]
        async with client.pipeline(transaction=True) as pipe:
            pipe.set("gate:a", 1)
            pipe.incr("gate:a")
            assert await pipe.execute() == [True, 2]
        await client.eval("return redis.call('INCR', KEYS[1])", 1, "gate:a")
        with pytest.raises(aioredis.ResponseError):
            await client.execute_command("INCR", "gate:a", "extra")  # type: ignore[no-untyped-call]
    finally:
        await client.aclose()
        await gate.close()
    assert keeper.steps == [
        "MULTI; SET gate:a 1; INCRBY gate:a 1; EXEC",  # redis-py sends INCR as INCRBY
        "EVAL \"return redis.call('INCR', KEYS[1])\" 1 gate:a",
        "INCR gate:a extra",
    ]
    assert keeper.ends == [[], [], ["ERR"]]


async def test_a_lease_runs_out_as_a_step_and_both_stores_are_judged(
    servers: Servers, own_redis: str
) -> None:
    """redis-cli and psql as actors: every order of a lease taken with PX, and one where it
    ran out before the other actor's SET (only actor 1's may: --pause 1); the invariant
    command reads both stores."""
    assert servers.pg is not None
    plan = RedisPlan(own_redis, [["SET", "seen", "0"]], pauses=frozenset({1}))
    cli = 'redis-cli -u "$REDIS_URL"'
    take = actors(
        f"sh -c '{cli} SET lease a1 NX PX 60000; {cli} GET lease'",
        f'sh -c \'test "$({cli} SET lease a2 NX PX 60000)" = OK && '
        'psql -qAt -c "INSERT INTO took VALUES (2)"; true\'',
    )
    check = f'sh -c \'test "$({cli} GET seen)" = 0 && psql -qAt -c "SELECT 1"\''
    found = await explore(
        servers.pg.dsn, take, "CREATE TABLE took (n int)", "SELECT true",
        redis=plan, invariant_cmd=check,
    )  # fmt: skip
    assert found.complete and found.broke == []
    assert not any("t2" in o.run.schedule for o in found.orders)  # actor 2 never paused
    took = {tuple(o.run.schedule[:3]): "INSERT" in " ".join(o.run.transcript) for o in found.orders}
    assert took[(1, "t1", 2)] and not took[(1, 2, 1)]
    ran_out = next(o for o in found.orders if o.run.schedule[:2] == [1, "t1"])
    assert "ran out" in ran_out.run.transcript[1] and "exited 0" in ran_out.invariant


@needs_node_redis[0]
@needs_node_redis[1]
async def test_node_redis_get_then_del_deletes_the_next_holders_lock(
    servers: Servers, own_redis: str
) -> None:
    """DL-12 in node-redis, unchanged: with actor 1 paused past its lease (the document's
    A), GET-then-DEL deletes actor 2's lock; the trace of that order shows the lease run
    out between the GET and the DEL; compare-and-delete in Lua keeps every order."""
    assert servers.pg is not None
    plan = RedisPlan(own_redis, pauses=frozenset({1}))
    buggy = actors("node lease.js A", "node lease.js B --check")
    found = await explore(
        servers.pg.dsn, buggy, "", "SELECT true", first=True, cwd=NODE_EXAMPLES, redis=plan
    )
    broke = found.broke[0]
    assert broke.outcome() == "broke a1=0 a2=1"
    assert broke.run.schedule == [1, 1, "t1", 2, 1, 2]
    assert "lock lost while held" in broke.run.output[2]
    again = await trace(
        servers.pg.dsn, buggy, "", "SELECT true", broke.run.schedule, cwd=NODE_EXAMPLES, redis=plan
    )
    assert again.run.transcript[2].startswith("step a1: <held until its lease lock:invoice:42")
    assert again.run.transcript[4] == "step a1: DEL lock:invoice:42" and not again.kept
    fixed = actors("node lease.js A --cad", "node lease.js B --check")
    kept = await explore(servers.pg.dsn, fixed, "", "SELECT true", cwd=NODE_EXAMPLES, redis=plan)
    assert kept.complete and kept.broke == [] and len(kept.orders) >= 5


def test_bad_redis_options_are_one_line(servers: Servers, tmp_path: Path) -> None:
    """An actor number --pause does not have, a missing or unreadable --redis-setup, an
    empty --invariant-cmd, a setup command the server refuses, the options without
    --actor: one line on stderr and exit 2, no traceback."""
    assert servers.pg is not None
    (tmp_path / "quote.redis").write_text('SET k "unclosed\n')
    (tmp_path / "refused.redis").write_text("# a comment\nSET k 1\nNO-SUCH-COMMAND k\n")
    env = {**os.environ, "LOCKLAB_PG_DSN": servers.pg.dsn}
    pair = ["--actor", "true", "--actor", "true"]
    for args, says in [
        ([*pair, "--pause", "3"], "--pause 3: actors are numbered 1 to 2"),
        ([*pair, "--redis-setup", "missing.redis"], "--redis-setup missing.redis"),
        ([*pair, "--redis-setup", "quote.redis"], "--redis-setup line 1"),
        ([*pair, "--invariant-cmd", " "], "--invariant-cmd: an empty command"),
        ([*pair, "--redis-setup", "refused.redis"], "the Redis setup failed at 'NO-SUCH"),
        (["lost-update", "--pause", "1"], "--pause: only with --actor"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "lab.cli", "explore", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = [line for line in done.stderr.splitlines() if line.startswith("locklab:")]
        assert done.returncode == 2 and len(lines) == 1, (args, done.stderr)
        assert says in lines[0] and "Traceback" not in done.stderr, (args, done.stderr)


KEY = "lock:invoice:42"
CAD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end"


def worker_get_then_del(dsn: str, redis_url: str) -> None:
    """DL-12's worker in redis-py: take the lock, release it with GET then DEL."""
    r = redis.Redis.from_url(redis_url)
    if r.set(KEY, "A", nx=True, px=30000) and r.get(KEY) == b"A":
        r.delete(KEY)


def worker_compare_and_delete(dsn: str, redis_url: str) -> None:
    """The same worker, released with compare-and-delete in Lua."""
    r = redis.Redis.from_url(redis_url)
    if r.set(KEY, "A", nx=True, px=30000):
        r.eval(CAD, 1, KEY, "A")


def next_holder(dsn: str, redis_url: str) -> None:
    """Take the lock and check, as a job does before it commits, that it still holds it."""
    r = redis.Redis.from_url(redis_url)
    if r.set(KEY, "B", nx=True, px=30000) and r.get(KEY) != b"B":
        raise AssertionError(f"lock lost while held: {KEY} is {r.get(KEY)!r}")


async def test_python_functions_get_a_redis_url_and_their_commands_are_steps(
    servers: Servers, own_redis: str
) -> None:
    """explore_functions with a Redis: redis-py functions that take a second argument get
    their own port of the Redis gate; GET-then-DEL breaks after actor 1's lease ran out,
    compare-and-delete keeps every order."""
    assert servers.pg is not None
    plan = RedisPlan(own_redis, pauses=frozenset({1}))
    dsn = servers.pg.dsn
    found = await explore_functions(dsn, [worker_get_then_del, next_holder], redis=plan)
    assert len(found.broke) == 1 and "lock lost while held" in found.broke[0].run.output[2]
    assert "t1" in found.broke[0].run.schedule
    kept = await explore_functions(
        dsn, [worker_compare_and_delete, next_holder], redis=plan, first=False
    )
    assert kept.complete and kept.broke == [] and len(kept.orders) >= 5


async def test_the_gate_serves_redis_beside_postgres_and_logs_its_commands(
    servers: Servers, own_redis: str
) -> None:
    """`locklab gate --redis`'s engine: the export line names a Redis gate, a client with
    no password gets through it, and the log has each command (never the gate's AUTH)."""
    assert servers.pg is not None
    said: list[str] = []
    listening = asyncio.Event()  # the gate has said where it listens

    def say(line: str) -> None:
        said.append(line)
        if "export" in line:
            listening.set()

    log = io.StringIO()
    task = asyncio.create_task(serve(servers.pg.dsn, 0, log, say, (own_redis, 0)))
    await asyncio.wait_for(listening.wait(), 60)
    url = next(w for w in said[-1].split() if w.startswith("REDIS_URL="))[len("REDIS_URL=") :]
    client = aioredis.Redis.from_url(url)
    try:
        assert await client.set("gate:served", "1") and await client.get("gate:served") == b"1"
    finally:
        await client.aclose()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    lines = log.getvalue().splitlines()
    assert "r1 SET gate:served 1" in lines and "r1 GET gate:served" in lines
    assert not any("AUTH" in line for line in lines)
