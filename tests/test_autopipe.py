"""The auto-pipelining Redis client: one write per loop iteration, replies in order."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from lab.aio import within
from lab.kit.autopipe import AutoPipeline, ReplyError, _PyReader, pack
from lab.kit.waiters import Call, Command, Sleep, Waiter, Waiters, drive
from lab.servers import Servers


@pytest.fixture
async def client(servers: Servers) -> AutoPipeline:
    assert servers.redis is not None
    return await AutoPipeline.connect(servers.redis.url)


def _key(name: str) -> str:
    return f"locklab:autopipe-test:{uuid.uuid4().hex[:8]}:{name}"


async def test_one_tick_is_one_write_and_replies_keep_their_order(client: AutoPipeline) -> None:
    """200 SETs and GETs issued in one tick go out in one write; each caller gets its own."""
    keys = [_key(str(i)) for i in range(100)]
    try:
        sets = [client.set(k, f"v{i}", px=60_000) for i, k in enumerate(keys)]
        gets = [client.get(k) for k in keys]
        assert await asyncio.gather(*sets) == [True] * 100
        assert await asyncio.gather(*gets) == [f"v{i}".encode() for i in range(100)]
        assert client.batches == 1 and client.commands == 200
    finally:
        await client.delete(*keys)
        await client.aclose()


async def test_an_error_fails_only_its_own_command(client: AutoPipeline) -> None:
    """INCR on a string fails that caller only; the commands around it in the batch succeed."""
    key, counter = _key("text"), _key("n")
    try:
        await client.set(key, "not a number")
        results = await asyncio.gather(
            client.incr(counter), client.incr(key), client.get(key), return_exceptions=True
        )
        assert results[0] == 1
        assert isinstance(results[1], ReplyError) and "not an integer" in str(results[1])
        assert results[2] == b"not a number"
        assert await client.set(key, "x", nx=True) is None  # redis-py's answer to a failed NX
    finally:
        await client.delete(key, counter)
        await client.aclose()


async def test_a_cancelled_caller_does_not_shift_the_replies(client: AutoPipeline) -> None:
    """A caller cancelled while its reply is on the way: the next caller still gets its own."""
    a, b = _key("a"), _key("b")
    try:
        await asyncio.gather(client.set(a, "A"), client.set(b, "B"))
        first = asyncio.ensure_future(client.get(a))
        second = asyncio.ensure_future(client.get(b))
        first.cancel()
        assert await second == b"B"
        assert await client.get(a) == b"A"
    finally:
        await client.delete(a, b)
        await client.aclose()


async def test_a_closed_connection_fails_what_waits(client: AutoPipeline) -> None:
    """Commands after the connection closed end with ConnectionError, not a hang."""
    client.close()
    await asyncio.sleep(0.05)
    with pytest.raises(ConnectionError):
        await within(client.get(_key("x")), 5)


def test_python_reader_parses_what_redis_sends() -> None:
    """The fallback parser (no hiredis) reads status, error, integer, bulk, nil and arrays,
    and waits for the rest of a reply split across reads."""
    r = _PyReader()
    r.feed(b"+OK\r\n-ERR bad\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n$1\r\na\r\n:1\r\n$5\r\nhe")
    assert r.gets() == b"OK"
    err = r.gets()
    assert isinstance(err, ReplyError) and str(err) == "ERR bad"
    assert [r.gets(), r.gets(), r.gets(), r.gets()] == [42, b"abc", None, [b"a", 1]]
    assert r.gets() is False
    r.feed(b"llo\r\n")
    assert r.gets() == b"hello"
    assert pack(("SET", "k", 5)) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n5\r\n"


# --- waiters as data --------------------------------------------------------------------


class Boom(Exception):
    """A waiter's own error."""


def _count_down(key: str, depth: int) -> Waiter[int]:
    """Recursion as the document writes it: each level a call of its own."""
    if depth == 0:
        value: bytes = yield Command.get(key)
        return int(value)
    below: int = yield Call(_count_down(key, depth - 1))
    return below + 1


def _sleeper(seconds: float) -> Waiter[float]:
    start = time.perf_counter()
    yield Sleep(seconds)
    return time.perf_counter() - start


def _raises_after(key: str) -> Waiter[None]:
    yield Command.get(key)
    raise Boom("after the reply")


def _catches(key: str) -> Waiter[str]:
    try:
        yield Call(_raises_after(key))
    except Boom as exc:
        return f"caught {exc}"
    return "not raised"


def _incr_text(key: str) -> Waiter[str]:
    try:
        yield Command("incr", ("INCRBY", key, 1), (key, 1))
    except ReplyError as exc:
        return f"reply error: {exc}"
    return "no error"


async def test_waiters_run_commands_sleeps_and_calls(client: AutoPipeline) -> None:
    """Waiters' commands share the pipeline's one write per tick; Call runs a recursion
    3,000 deep (deeper than Python's stack) and hands each value back; a sleep never ends
    before its time on the real clock; errors reach the waiter that caused them."""
    key, text = _key("n"), _key("text")
    engine = Waiters(client)
    try:
        assert await client.set(key, "7") and await client.set(text, "abc")
        before = client.batches
        got = await asyncio.gather(*(engine.run(_count_down(key, 3)) for _ in range(50)))
        assert got == [10] * 50 and client.batches == before + 1  # 50 GETs, one write
        assert await engine.run(_count_down(key, 3000)) == 3007
        slept = await asyncio.gather(*(engine.run(_sleeper(0.02)) for _ in range(20)))
        assert min(slept) >= 0.02
        assert await engine.run(_catches(key)) == "caught after the reply"
        assert (await engine.run(_incr_text(text))).startswith("reply error: ")
        with pytest.raises(Boom):
            await engine.run(_raises_after(key))
    finally:
        await client.delete(key, text)
        await client.aclose()


async def test_an_abandoned_waiter_does_not_shift_the_replies(client: AutoPipeline) -> None:
    """A waiter whose caller gave up (its future cancelled) mid-command: its reply is read
    and dropped, its sleep ignored, and the next waiter still gets its own reply."""
    a, b = _key("a"), _key("b")
    try:
        await asyncio.gather(client.set(a, "A"), client.set(b, "B"))
        first = Waiters(client).run(_count_down(a, 0))
        first.cancel()
        late = Waiters(client).run(_sleeper(0.01))
        late.cancel()
        assert await Waiters(client).run(_only_get(b)) == b"B"
        assert await client.get(a) == b"A"
    finally:
        await client.delete(a, b)
        await client.aclose()


def _only_get(key: str) -> Waiter[bytes]:
    value: bytes = yield Command.get(key)
    return value


async def test_drive_runs_the_same_waiters_on_redis_py(servers: Servers) -> None:
    """drive(): the same generators with one await per command on redis-py's client."""
    import redis.asyncio as aioredis

    assert servers.redis is not None
    r = aioredis.Redis.from_url(servers.redis.url)
    key, text = _key("n"), _key("text")
    try:
        await r.set(key, "7")
        await r.set(text, "abc")
        assert await drive(_count_down(key, 5), r) == 12
        assert await drive(_catches(key), r) == "caught after the reply"
        assert (await drive(_incr_text(text), r)).startswith("reply error: ")
        assert await drive(_sleeper(0.02), r) >= 0.02
        lock = Command.set(_key("lock"), "1", nx=True, px=10_000)
        assert await drive(_first(lock), r) is True and await drive(_first(lock), r) is None
    finally:
        await r.delete(key, text)
        await r.aclose()


def _first(command: Command) -> Waiter[object]:
    value: object = yield command
    return value
