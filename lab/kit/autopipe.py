"""A Redis client that pipelines what one event-loop iteration asks, the way node-redis does.

node-redis (v4 and later) writes every command issued in the same tick of the event loop
to its one connection at once and reads the replies in order. redis-py's asyncio client
instead takes a pooled connection per command and waits for its reply before that
connection serves another, so 5,000 waiters are 5,000 round trips through the event loop
on 5,000 connections.

`AutoPipeline` queues the commands of one loop iteration and writes them in one write
(scheduled with `loop.call_soon`) to one of its `connections` (round robin per tick);
the replies come back in order and each caller gets its own, or its own command's error
(a WRONGTYPE in one command does not fail the others). A lost connection fails every
command still waiting on it. Commands are written without waiting for earlier replies,
as node-redis does; a caller that is cancelled does not desynchronise the connection (its
reply is read and dropped).

Why not redis-py's `pipeline(transaction=False)` per tick: measured here at 5,000
pollers it reached 17k GET/s on one core, most of it in redis-py's per-command packing
and per-reply timeout contexts; writing RESP directly and parsing with hiredis is what
this module does instead (figures in docs/load.md).

Only the commands the scenarios use are exposed.
"""

from __future__ import annotations

import asyncio
import collections
import urllib.parse
from collections.abc import Callable
from typing import Any

from redis.exceptions import ResponseError

from lab.aio import within

try:  # hiredis parses replies in C; the pure-Python parser below is the fallback
    import hiredis

    HIREDIS = True
except ImportError:  # pragma: no cover - exercised where hiredis is not installed
    HIREDIS = False


def _mapped(inner: asyncio.Future[Any], fn: Callable[[Any], Any]) -> asyncio.Future[Any]:
    """A future of fn(inner's result), or inner's error; cancelling it is the caller's own."""
    outer: asyncio.Future[Any] = inner.get_loop().create_future()

    def done(f: asyncio.Future[Any]) -> None:
        if outer.done():
            return
        if f.cancelled():
            outer.cancel()
        elif (exc := f.exception()) is not None:
            outer.set_exception(exc)
        else:
            outer.set_result(fn(f.result()))

    inner.add_done_callback(done)
    return outer


class ReplyError(ResponseError):
    """An error reply from Redis for one command (e.g. WRONGTYPE, NOSCRIPT); redis-py's
    ResponseError, so a caller catches the same class on either client."""


PACKED_CACHE = 4096  # distinct commands kept packed (pollers repeat the same few)
_packed: dict[tuple[Any, ...], bytes] = {}


def pack(args: tuple[Any, ...]) -> bytes:
    """One command in RESP: *<n> then $<len> <bytes> per argument. 5,000 pollers send the
    same GET and SET over and over: those are packed once (it was the client's top cost)."""
    try:
        return _packed[args]
    except KeyError:
        pass
    except TypeError:  # an unhashable argument: pack it, keep nothing
        return _pack(args)
    if len(_packed) >= PACKED_CACHE:
        _packed.clear()
    out = _packed[args] = _pack(args)
    return out


def _pack(args: tuple[Any, ...]) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        elif isinstance(a, str):
            b = a.encode()
        elif isinstance(a, (int, float)) and not isinstance(a, bool):
            b = repr(a).encode()
        else:
            raise TypeError(f"cannot send {type(a).__name__} to Redis")
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


class _PyReader:
    """A minimal RESP2 reader (used when hiredis is absent)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def gets(self) -> Any:
        parsed = self._parse(0)
        if parsed is None:
            return False
        value, end = parsed
        del self._buf[:end]
        return value

    def _parse(self, pos: int) -> tuple[Any, int] | None:
        eol = self._buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        kind, line, nxt = self._buf[pos : pos + 1], bytes(self._buf[pos + 1 : eol]), eol + 2
        if kind == b"+":
            return line, nxt
        if kind == b"-":
            return ReplyError(line.decode(errors="replace")), nxt
        if kind == b":":
            return int(line), nxt
        if kind == b"$":
            size = int(line)
            if size < 0:
                return None, nxt
            if len(self._buf) < nxt + size + 2:
                return None
            return bytes(self._buf[nxt : nxt + size]), nxt + size + 2
        if kind == b"*":
            count = int(line)
            if count < 0:
                return None, nxt
            items = []
            for _ in range(count):
                got = self._parse(nxt)
                if got is None:
                    return None
                item, nxt = got
                items.append(item)
            return items, nxt
        raise ConnectionError(f"unexpected RESP type {kind!r}")


def _reader() -> Any:
    if HIREDIS:
        return hiredis.Reader(replyError=ReplyError)
    return _PyReader()


class _Conn(asyncio.Protocol):
    """One connection: writes batches, matches replies to callers in order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reader = _reader()
        self.pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.lost: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP transport (uvloop's too)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            fut = self.pending.popleft()
            if fut.done():  # its caller was cancelled: the reply is read and dropped
                continue
            if isinstance(reply, ReplyError):
                fut.set_exception(reply)
            else:
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = ConnectionError(f"Redis connection lost: {exc or 'closed'}")
        while self.pending:
            fut = self.pending.popleft()
            if not fut.done():
                fut.set_exception(self.lost)


class AutoPipeline:
    """Commands of one loop iteration go out in one write; replies come back per caller."""

    def __init__(self, conns: list[_Conn]) -> None:
        self._conns = conns
        self._next = 0
        self._buf: list[bytes] = []
        self._futs: list[Any] = []  # futures, or lab.kit.waiters' waiters (which answer like one)
        self._scheduled = False
        self.batches = 0  # writes made
        self.commands = 0  # commands in them

    @classmethod
    async def connect(cls, url: str, connections: int = 1, timeout: float = 10) -> AutoPipeline:
        """`connections` connections to the Redis at `url` (password and db from the URL)."""
        if connections < 1:
            raise ValueError("connections must be >= 1")
        parts = urllib.parse.urlsplit(url)
        loop = asyncio.get_running_loop()
        conns: list[_Conn] = []
        client = cls(conns)
        try:
            for _ in range(connections):
                _, proto = await within(
                    loop.create_connection(
                        _Conn, parts.hostname or "127.0.0.1", parts.port or 6379
                    ),
                    timeout,
                )
                conns.append(proto)
            hello: list[asyncio.Future[Any]] = []
            for i in range(connections):
                client._next = i
                if parts.password:
                    user = urllib.parse.unquote(parts.username or "")
                    secret = urllib.parse.unquote(parts.password)
                    hello.append(client.execute("AUTH", *([user] if user else []), secret))
                db = (parts.path or "/0").lstrip("/") or "0"
                if db != "0":
                    hello.append(client.execute("SELECT", db))
                client._flush()
            await within(asyncio.gather(*hello), timeout)
        except BaseException:
            client.close()
            raise
        client._next = client.batches = client.commands = 0  # count the actors' traffic only
        return client

    # --- the subset of commands the scenarios use --------------------------------------

    def get(self, name: str) -> asyncio.Future[Any]:
        return self.execute("GET", name)

    def set(
        self,
        name: str,
        value: Any,
        *,
        ex: int | None = None,
        px: int | None = None,
        nx: bool = False,
    ) -> asyncio.Future[Any]:
        """Queued now (not when awaited); True, or None when NX found the key (redis-py's)."""
        return _mapped(self.execute(*set_wire(name, value, ex, px, nx)), is_ok)

    def delete(self, *names: str) -> asyncio.Future[Any]:
        return self.execute("DEL", *names)

    def eval(self, script: str, numkeys: int, *keys_and_args: Any) -> asyncio.Future[Any]:
        return self.execute("EVAL", script, numkeys, *keys_and_args)

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> asyncio.Future[Any]:
        return self.execute("EVALSHA", sha, numkeys, *keys_and_args)

    def pttl(self, name: str) -> asyncio.Future[Any]:
        return self.execute("PTTL", name)

    def incr(self, name: str, amount: int = 1) -> asyncio.Future[Any]:
        return self.execute("INCRBY", name, amount)

    # --- batching -------------------------------------------------------------------------

    def execute(self, *args: Any) -> asyncio.Future[Any]:
        """Queue one command for this loop iteration's write; its reply, or its error."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._buf.append(pack(args))
        self._futs.append(fut)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return fut

    def enqueue(self, packed: bytes, caller: Any) -> None:
        """A packed command for this tick's write, answered to `caller`: anything with a
        future's done / set_result / set_exception (lab.kit.waiters)."""
        self._buf.append(packed)
        self._futs.append(caller)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if not self._futs:
            return
        buf, futs = self._buf, self._futs
        self._buf, self._futs = [], []
        conn = self._conns[self._next % len(self._conns)]
        self._next += 1
        if conn.lost is not None or conn.transport is None or conn.transport.is_closing():
            err = conn.lost or ConnectionError("Redis connection closed")
            for f in futs:
                if not f.done():
                    f.set_exception(err)
            return
        conn.pending.extend(futs)
        conn.transport.write(b"".join(buf))
        self.batches += 1
        self.commands += len(futs)

    def close(self) -> None:
        for c in self._conns:
            if c.transport is not None:
                c.transport.close()

    async def aclose(self) -> None:
        self.close()
        await asyncio.sleep(0)


# --- SET, as redis-py sends it and answers it -----------------------------------------


def set_wire(name: str, value: Any, ex: int | None, px: int | None, nx: bool) -> tuple[Any, ...]:
    """SET's words as redis-py's `set(name, value, ex=, px=, nx=)` sends them."""
    words: list[Any] = ["SET", name, value]
    words += ["EX", ex] if ex is not None else []
    words += ["PX", px] if px is not None else []
    words += ["NX"] if nx else []
    return tuple(words)


def is_ok(reply: Any) -> bool | None:
    """SET's reply as redis-py gives it: True, or None when NX found the key."""
    return True if reply in (b"OK", "OK", True) else None
