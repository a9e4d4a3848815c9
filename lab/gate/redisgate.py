"""The gate for Redis: a RESP proxy on loopback whose client commands are step points.

Every client connection is a session, known by the client id the server gives the
gate's own connection (``CLIENT ID``). The gate logs in to the server itself (AUTH with
the server's password, which actors never see), so an actor connects with no password.

Every command is a step, held until the keeper lets it go, but:

* a MULTI ... EXEC block is one step: MULTI and the commands it queues go on at once (the
  server only queues them), and EXEC, which runs them all, is held, shown as the block;
* commands about the connection itself (AUTH, HELLO, SELECT, CLIENT, PING, ECHO, RESET,
  QUIT, DISCARD) are no step: they touch nothing another client sees.

The server's reply to a step ends it: its error code ('ERR', 'WRONGTYPE'...) is the
step's error, as a SQLSTATE is on the PostgreSQL gate. Replies are counted in order, so a
client that pipelines has its commands held one at a time and answered as it expects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TextIO

from lab.gate import resp
from lab.gate.keys import RedisSide
from lab.gate.proxy import CHUNK, Group, Keeper, Session, close_listeners
from lab.gate.wire import Statement

CONNECTION = frozenset(
    b"AUTH HELLO SELECT CLIENT PING ECHO RESET QUIT DISCARD READONLY READWRITE".split()
)


class RedisGate:
    """The proxy: `await gate.start(actor=n)` listens on 127.0.0.1 (any free port)."""

    def __init__(
        self,
        host: str,
        port: int,
        password: str,
        keeper: Keeper | None,
        log: TextIO | None = None,
    ) -> None:
        self.host, self.upstream_port, self.password = host, port, password
        self.keeper = keeper
        self.log = log  # each session's steps as they pass (never AUTH: it is no step)
        self.sessions: list[Session] = []
        self.failures: list[Exception] = []
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self, actor: int = 0, port: int = 0) -> int:
        """Listen on 127.0.0.1:`port` (0: a free one) for `actor`'s sessions; its port."""

        def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Awaitable[None]:
            return self._serve(reader, writer, actor)

        server = await asyncio.start_server(serve, "127.0.0.1", port)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def write_log(self, session: Session, text: str) -> None:
        if self.log is not None:
            self.log.write(f"r{session.number} {text}\n")
            self.log.flush()

    async def close(self) -> None:
        await close_listeners(self._servers, self._tasks)

    async def _serve(
        self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter, actor: int
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            s_reader, s_writer = await asyncio.open_connection(self.host, self.upstream_port)
            try:
                client_id = await self._login(s_reader, s_writer)
                peer = c_writer.get_extra_info("peername") or ("?", 0)
                session = Session(len(self.sessions) + 1, peer, {}, actor, client_id)
                session.store = "redis"
                self.sessions.append(session)
                self.write_log(session, f"connected id={client_id}")
                try:
                    connection = _Connection(self, session, s_writer)
                    await connection.run(c_reader, c_writer, s_reader)
                finally:
                    self.write_log(session, "closed")
            finally:
                s_writer.close()
        except (ConnectionError, asyncio.IncompleteReadError, resp.RespError):
            pass  # either side went away or spoke something else: the connection ends
        except asyncio.CancelledError:
            pass  # close() ends it (see proxy.Gate._serve)
        except Exception as exc:  # the keeper's own fault: the gate's owner must hear of it
            self.failures.append(exc)
        finally:
            self._tasks.discard(task)
            c_writer.close()

    async def _login(self, s_reader: asyncio.StreamReader, s_writer: asyncio.StreamWriter) -> int:
        """AUTH on the gate's own connection (the reply is read here, never relayed), then
        the server's id for it."""
        if self.password:
            s_writer.write(_command(b"AUTH", self.password.encode()))
            line = await s_reader.readuntil(resp.LINE)
            if not line.startswith(b"+"):
                raise ConnectionError("the Redis server refused the gate's login")
        s_writer.write(_command(b"CLIENT", b"ID"))
        line = await s_reader.readuntil(resp.LINE)
        return int(line[1:-2])


class _Connection:
    """One relayed client connection (see the module doc)."""

    def __init__(self, gate: RedisGate, session: Session, s_writer: Any) -> None:
        self.gate, self.keeper, self.session, self.s_writer = gate, gate.keeper, session, s_writer
        self.pending: deque[bool] = deque()  # per command sent: whether its reply ends a step
        self.block: list[list[bytes]] | None = None  # commands since MULTI

    async def run(
        self,
        c_reader: asyncio.StreamReader,
        c_writer: asyncio.StreamWriter,
        s_reader: asyncio.StreamReader,
    ) -> None:
        if self.keeper is not None:
            await self.keeper.opened(self.session)
        down = asyncio.create_task(self._from_server(s_reader, c_writer))
        try:
            while True:
                words, raw = await resp.read_command(c_reader)
                if words:
                    await self._send(words, raw)
        finally:
            down.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await down
            if self.keeper is not None:
                self.keeper.closed(self.session)

    async def _send(self, words: list[bytes], raw: bytes) -> None:
        name = words[0].upper()
        step = False
        if name == b"MULTI":
            self.block = []
        elif name == b"DISCARD":
            self.block = None
        elif name == b"EXEC" and self.block is not None:
            block, self.block = self.block, None
            step = await self._hold([[b"MULTI"], *block, words])
        elif self.block is not None:
            self.block.append(words)  # queued by the server, run at EXEC
        elif name not in CONNECTION:
            step = await self._hold([words])
        self.pending.append(step)
        self.s_writer.write(raw)
        await self.s_writer.drain()

    async def _hold(self, commands: list[list[bytes]]) -> bool:
        """Wait for the keeper's grant of a step of `commands` (shown as one line)."""
        text = "; ".join(resp.shown(c) for c in commands)
        if self.keeper is not None:
            group = Group(statements=[Statement(text)], commands=commands)
            await self.keeper.step(self.session, group)
        self.gate.write_log(self.session, text)
        return True

    async def _from_server(self, s_reader: asyncio.StreamReader, c_writer: Any) -> None:
        replies = resp.Replies()
        while chunk := await s_reader.read(CHUNK):
            whole = replies.feed(chunk)
            if whole:
                c_writer.write(whole)
            for reply in replies.replies:
                if self.pending and self.pending.popleft() and self.keeper is not None:
                    code = resp.error_code(reply)
                    self.session.last_messages = (
                        [reply[1:].decode(errors="replace")] if code else []
                    )
                    self.keeper.ready(self.session, [code] if code else [])
            replies.replies.clear()
            await c_writer.drain()
        c_writer.close()


@contextlib.asynccontextmanager
async def redis_gate(side: RedisSide | None, keeper: Keeper) -> AsyncIterator[RedisGate | None]:
    """The Redis gate of one order, when the actors have a Redis."""
    if side is None:
        yield None
        return
    gate = RedisGate(side.host, side.port, side.password, keeper)
    try:
        yield gate
    finally:
        await gate.close()


def _command(*words: bytes) -> bytes:
    """A command as a client sends it: an array of bulk strings."""
    parts = [b"*%d\r\n" % len(words)]
    for word in words:
        parts.append(b"$%d\r\n%s\r\n" % (len(word), word))
    return b"".join(parts)
