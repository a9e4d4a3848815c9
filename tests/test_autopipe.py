"""The auto-pipelining Redis client: one write per loop iteration, replies in order."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from lab.aio import within
from lab.autopipe import AutoPipeline, ReplyError, _PyReader, pack
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
