"""The gate: a PostgreSQL proxy on loopback whose client statements are step points.

Every client connection that logs in is a session, known by the backend pid the server
gives it (BackendKeyData). Every statement group the client sends (a simple Query, or
the extended messages up to a Sync or a Flush) that runs something is a step: the gate
holds it until its keeper lets it go. The driver's own statements at connect are not
steps: before the session's first step and out of a transaction, a group of statements
that touch nothing another session can see (`SET name = value`, `SHOW name`, and a SELECT
with no FROM of constants and a few side-effect-free functions of PostgreSQL's own:
version(), current_schema(), current_setting(...)) goes on as it came. A SELECT counts
only in a group that ends its implicit transaction (a simple Query or a Sync; not a
Flush): then no REPEATABLE READ snapshot it took outlives it. Anything else (an
advisory lock, nextval(), a FROM) is a step. The server's ReadyForQuery ends the step; its
status byte says whether the session is in a transaction, so a driver that sends BEGIN
in the same group as its first statement is read the same as one that sends it alone.

Everything else passes as it came: the startup packet, authentication (SCRAM, md5 or
clear text: the gate reads none of it), parameter status, notices, COPY data, errors.
An SSLRequest is answered 'N' (no TLS on loopback): `sslmode=prefer` goes on in plain
text, `sslmode=require` stops in the client with its own one line. A CancelRequest
comes on a new connection and goes on to the server: the keys the client holds are the
server's own, passed through unchanged.

With no keeper and no log, the gate is a byte relay after the startup packet.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from lab.gate import wire
from lab.gate.wire import Statement

CHUNK = 1 << 16
SECRET = re.compile(r"(PASSWORD\s+)'(?:[^']|'')*'", re.IGNORECASE)
_END = r"\s*(?:;\s*)?$"  # a statement's end: no two runs of blanks to split (linear)
SESSION_SET = re.compile(r"\s*SET\s[^;]*(?:;\s*)?$", re.IGNORECASE)
SESSION_SHOW = re.compile(rf"\s*SHOW\s+[\w.]+(?:\s+[\w.]+){{0,2}}{_END}", re.IGNORECASE)
# A SELECT with no FROM whose values are constants, parameters and casts of them to a
# built-in type, or calls of an allow-list of PostgreSQL's functions that read only the
# session's own state (unqualified names are pg_catalog's: the search path puts it first
# unless it names it later). Anything the pattern does not spell out is a step.
_LITERAL = r"(?:'(?:[^']|'')*'|-?\d+(?:\.\d+)?|\$\d+|TRUE|FALSE|NULL)"
_TYPE = (
    r"(?:pg_catalog\s*\.\s*)?(?:CHARACTER\s+VARYING|VARCHAR|CHAR|TEXT|INTEGER|INT|BIGINT"
    r"|SMALLINT|BOOLEAN|NUMERIC)(?:\s*\(\s*\d+(?:\s*,\s*\d+)?\s*\))?"
)
_CALL = (
    r"(?:pg_catalog\s*\.\s*)?(?:version\s*\(\s*\)|current_schema(?:\s*\(\s*\))?"
    r"|current_schemas\s*\(\s*(?:TRUE|FALSE)\s*\)"
    rf"|current_setting\s*\(\s*{_LITERAL}\s*(?:,\s*(?:TRUE|FALSE)\s*)?\))"
)
_VALUE = (
    rf"(?:CAST\s*\(\s*(?:{_LITERAL}|{_CALL})\s+AS\s+{_TYPE}\s*\)"
    rf"|(?:{_LITERAL}|{_CALL})(?:\s*::\s*{_TYPE})?)"
)
_ITEM = rf"{_VALUE}(?:\s+AS\s+(?:\w+|\"[^\"]*\"))?"
PURE_SELECT = re.compile(rf"\s*SELECT\s+{_ITEM}(?:\s*,\s*{_ITEM})*{_END}", re.IGNORECASE)


@dataclass
class Group:
    """One step point: the client's messages up to a Sync, a Flush or a simple Query."""

    messages: list[bytes] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    commands: list[list[bytes]] = field(default_factory=list)  # a Redis step's words

    @property
    def runs(self) -> bool:
        """Whether it executes anything (a Parse/Describe-only group does not)."""
        return bool(self.statements)

    def shown(self) -> str:
        return SECRET.sub(r"\1'***'", "; ".join(s.shown() for s in self.statements))

    def session_local(self) -> bool:
        """Whether it runs nothing but statements that touch only the session's own state,
        one each: `SET name = value`, `SHOW name`, and (in a group that does not end at a
        Flush, which would leave its implicit transaction open) a SELECT of PURE_SELECT."""
        flushed = bool(self.messages) and self.messages[-1][0] == wire.FLUSH
        return self.runs and all(
            SESSION_SET.match(s.sql)
            or SESSION_SHOW.match(s.sql)
            or (not flushed and PURE_SELECT.match(s.sql))
            for s in self.statements
        )


@dataclass(eq=False)  # a session is itself: hashed by identity
class Session:
    """One client connection that logged in through the gate."""

    number: int  # in the order sessions connected, from 1
    peer: tuple[str, int]
    parameters: dict[str, str]
    actor: int = 0  # the listener it came in on (Gate.start's `actor`)
    pid: int = 0  # the server's backend pid, from BackendKeyData
    status: str = "I"  # ReadyForQuery's: I idle, T in a transaction, E in a failed one
    errors: list[str] = field(default_factory=list)  # SQLSTATEs since the last ReadyForQuery
    messages: list[str] = field(default_factory=list)  # ... and their messages
    last_messages: list[str] = field(default_factory=list)  # those of the step that ended
    prepared: dict[str, str] = field(default_factory=dict)  # statement name -> SQL
    types: dict[str, list[int]] = field(default_factory=dict)  # statement name -> param types
    describing: deque[str] = field(default_factory=deque)  # Describe S sent, not yet answered
    bound: Statement | None = None
    began: bool = False  # a step of the client's own has run on it
    store: str = "postgresql"  # or "redis" (lab/gate/redisgate.py: pid is its client id)

    def driver_setup(self, group: Group) -> bool:
        """Whether `group` is the driver's own at connect (pgjdbc's `SET extra_float_digits`
        and `SET application_name`, a `select pg_catalog.version()`): statements that touch
        only the session's own state (Group.session_local), out of a transaction, before
        any step. In one, a SELECT could fix a REPEATABLE READ snapshot: a step."""
        return not self.began and self.status == "I" and group.session_local()

    @property
    def name(self) -> str:
        return f"s{self.number}"


class Keeper(Protocol):
    """What decides when a held statement goes on."""

    async def opened(self, session: Session) -> None:
        """The session logged in (it has its pid)."""

    async def step(self, session: Session, group: Group) -> None:
        """Return when `group` may go to the server."""

    async def between(self, session: Session, group: Group) -> None:
        """Return when a group that is not a step (one that runs nothing, or the driver's
        SETs at connect) may go to the server: it goes on its own."""

    def ready(self, session: Session, errors: list[str]) -> None:
        """The server ended the session's step (ReadyForQuery); `errors` its SQLSTATEs."""

    def closed(self, session: Session) -> None:
        """The session's connection ended."""


@dataclass
class Upstream:
    """Where the gate connects: a TCP host and port, or a Unix socket's path."""

    host: str
    port: int

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.host.startswith("/"):
            return await asyncio.open_unix_connection(f"{self.host}/.s.PGSQL.{self.port}")
        return await asyncio.open_connection(self.host, self.port)


class Gate:
    """The proxy: `await gate.start()` listens on 127.0.0.1 (port 0: any free one)."""

    def __init__(
        self,
        upstream: Upstream,
        keeper: Keeper | None = None,
        log: TextIO | None = None,
    ) -> None:
        self.upstream = upstream
        self.keeper = keeper
        self.log = log
        self.sessions: list[Session] = []
        self.failures: list[Exception] = []  # what went wrong outside the protocol
        self.port = 0  # the first listener's
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self, port: int = 0, actor: int = 0) -> int:
        """Listen on 127.0.0.1:`port` (0: a free one); sessions that log in on it belong to
        `actor` (actors are told apart by the port they came in on). Its port."""

        def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Awaitable[None]:
            return self._serve(reader, writer, actor)

        server = await asyncio.start_server(serve, "127.0.0.1", port)
        self._servers.append(server)
        bound = int(server.sockets[0].getsockname()[1])
        self.port = self.port or bound
        return bound

    async def close(self) -> None:
        """Stop listening and end every relayed connection."""
        await close_listeners(self._servers, self._tasks)

    async def __aenter__(self) -> Gate:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _write_log(self, session: Session, text: str) -> None:
        if self.log is not None:
            self.log.write(f"{session.name} {text}\n")
            self.log.flush()

    async def _serve(
        self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter, actor: int
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._relay(c_reader, c_writer, actor)
        except (ConnectionError, asyncio.IncompleteReadError, wire.ProtocolError):
            pass  # either side went away or spoke something else: the connection ends
        except asyncio.CancelledError:
            # close() ends it. Not re-raised: the task is asyncio's own connection callback,
            # which on Python 3.11 logs a traceback for a cancelled one (fixed in 3.12)
            pass
        except Exception as exc:  # the keeper's own fault: the gate's owner must hear of it
            self.failures.append(exc)
        finally:
            self._tasks.discard(task)
            c_writer.close()

    async def _relay(
        self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter, actor: int
    ) -> None:
        code, packet = await wire.read_packet(c_reader)
        while code in (wire.SSL_REQUEST, wire.GSSENC_REQUEST):
            c_writer.write(b"N")  # no TLS on loopback: the client goes on in plain text
            await c_writer.drain()
            code, packet = await wire.read_packet(c_reader)
        if code == wire.CANCEL_REQUEST:
            await self._cancel(packet)
            return
        if code != wire.PROTOCOL_3_0:
            raise wire.ProtocolError(f"protocol {code >> 16}.{code & 0xFFFF}")
        s_reader, s_writer = await self.upstream.connect()
        try:
            s_writer.write(packet)
            if self.keeper is None and self.log is None:
                await _pipe_both(c_reader, c_writer, s_reader, s_writer)
                return
            number = len(self.sessions) + 1
            peer = c_writer.get_extra_info("peername") or ("?", 0)
            session = Session(number, peer, wire.startup_parameters(packet), actor)
            self.sessions.append(session)
            await self._watch(session, c_reader, c_writer, s_reader, s_writer)
        finally:
            s_writer.close()

    async def _watch(
        self,
        session: Session,
        c_reader: asyncio.StreamReader,
        c_writer: asyncio.StreamWriter,
        s_reader: asyncio.StreamReader,
        s_writer: asyncio.StreamWriter,
    ) -> None:
        logged_in = asyncio.Event()
        down = asyncio.create_task(self._from_server(session, s_reader, c_writer, logged_in))
        try:
            await self._from_client(session, c_reader, s_writer, logged_in, down)
        finally:
            down.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await down
            if logged_in.is_set():
                self._write_log(session, "closed")
                if self.keeper is not None:
                    self.keeper.closed(session)

    async def _from_server(
        self,
        session: Session,
        s_reader: asyncio.StreamReader,
        c_writer: asyncio.StreamWriter,
        logged_in: asyncio.Event,
    ) -> None:
        """Every server message to the client; BackendKeyData, errors and ReadyForQuery
        read on the way."""
        frames = Frames()
        while chunk := await s_reader.read(CHUNK):
            whole = frames.feed(chunk)
            if whole:
                c_writer.write(whole)
            for message in frames.messages:
                self._on_server(session, message, logged_in)
            frames.messages.clear()
            await c_writer.drain()
        c_writer.close()

    def _on_server(self, session: Session, message: bytes, logged_in: asyncio.Event) -> None:
        kind = message[0]
        if kind == wire.BACKEND_KEY:
            session.pid = int.from_bytes(message[5:9], "big")
        elif kind == wire.ERROR:
            fields = wire.error_fields(message)
            session.errors.append(fields.get("C", "?????"))
            session.messages.append(fields.get("M", ""))
        elif kind == wire.PARAMETER_TYPES and session.describing:
            session.types[session.describing.popleft()] = wire.parameter_types(message)
        elif kind == wire.READY:
            session.status = chr(message[5])
            session.describing.clear()  # a Describe an error skipped is not answered
            errors, session.errors = session.errors, []
            session.last_messages, session.messages = session.messages, []
            if not logged_in.is_set():
                logged_in.set()  # the first ReadyForQuery ends the login
                who = session.parameters
                self._write_log(
                    session,
                    f"connected pid={session.pid} user={who.get('user', '?')} "
                    f"database={who.get('database', who.get('user', '?'))}",
                )
            else:
                for code in errors:
                    self._write_log(session, f"error {code}")
                if self.keeper is not None:
                    self.keeper.ready(session, errors)

    async def _from_client(
        self,
        session: Session,
        c_reader: asyncio.StreamReader,
        s_writer: asyncio.StreamWriter,
        logged_in: asyncio.Event,
        down: asyncio.Task[None],
    ) -> None:
        """Login messages as they come; after the login, statements in groups, each held
        until the keeper lets it go."""
        first = await self._login(c_reader, s_writer, logged_in, down)
        if first is None:
            return
        if self.keeper is not None:
            await self.keeper.opened(session)
        group = Group()
        kind, message = first
        while True:
            if kind in (wire.COPY_DATA, wire.COPY_DONE, wire.COPY_FAIL):
                s_writer.write(message)  # part of the statement already running
            else:
                group.messages.append(message)
                self._take(session, group, kind, message)
            if kind in (wire.QUERY, wire.SYNC, wire.FLUSH, wire.TERMINATE):
                await self._send(session, group, s_writer)
                group = Group()
                if kind == wire.TERMINATE:
                    return
            kind, message = await wire.read_message(c_reader)

    async def _login(
        self,
        c_reader: asyncio.StreamReader,
        s_writer: asyncio.StreamWriter,
        logged_in: asyncio.Event,
        down: asyncio.Task[None],
    ) -> tuple[int, bytes] | None:
        """Relay the client's login messages (SASL, password: unread) until the server's
        first ReadyForQuery; then the client's first message after it (None: gone)."""
        reading = asyncio.ensure_future(wire.read_message(c_reader))
        login = asyncio.ensure_future(logged_in.wait())
        try:
            while True:
                done, _ = await asyncio.wait(
                    {reading, login, down}, return_when=asyncio.FIRST_COMPLETED
                )
                if logged_in.is_set():
                    return await reading
                if down in done:
                    return None
                if reading in done:
                    s_writer.write(reading.result()[1])
                    reading = asyncio.ensure_future(wire.read_message(c_reader))
        finally:
            login.cancel()
            if not reading.done():
                reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading

    def _take(self, session: Session, group: Group, kind: int, message: bytes) -> None:
        """Read what a client message runs into the group."""
        if kind == wire.QUERY:
            group.statements.append(Statement(wire.query_text(message)))
        elif kind == wire.PARSE:
            name, sql, types = wire.parse_message(message)
            session.prepared[name] = sql
            session.types[name] = types
        elif kind == wire.DESCRIBE:
            described = wire.describe_statement(message)
            if described is not None:
                session.describing.append(described)
        elif kind == wire.BIND:
            name = wire.cstring(message, wire.cstring(message, 5)[1])[0]
            _, params = wire.bind_message(message, session.types.get(name, []))
            session.bound = Statement(session.prepared.get(name, f"<statement {name}>"), params)
        elif kind == wire.EXECUTE and session.bound is not None:
            group.statements.append(session.bound)

    async def _send(self, session: Session, group: Group, s_writer: asyncio.StreamWriter) -> None:
        """Hold a step until the keeper lets it go; a group that runs nothing (pgx's
        Parse/Describe before a new statement) or the driver's SETs at connect are no step
        (docs/gate.md: they touch nothing another session sees)."""
        step = group.runs and not session.driver_setup(group)
        session.began = session.began or step
        if self.keeper is not None:
            await (
                self.keeper.step(session, group) if step else self.keeper.between(session, group)
            )
        if group.runs:
            self._write_log(session, group.shown())
        s_writer.write(b"".join(group.messages))
        await s_writer.drain()

    async def _cancel(self, packet: bytes) -> None:
        """A CancelRequest carries the server's own keys: it goes to the server as is."""
        with contextlib.suppress(OSError):
            _, writer = await self.upstream.connect()
            writer.write(packet)
            await writer.drain()
            writer.close()


async def close_listeners(servers: list[asyncio.Server], tasks: set[asyncio.Task[Any]]) -> None:
    """Stop listening and end every relayed connection (a gate's, for Redis too)."""
    for server in servers:
        server.close()
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for server in servers:
        await server.wait_closed()


class Frames:
    """Cuts a byte stream into whole messages: `feed` returns the bytes of the messages
    it completed (to forward) and keeps in `messages` those of the kinds worth reading."""

    WANTED = frozenset((wire.BACKEND_KEY, wire.READY, wire.ERROR, wire.PARAMETER_TYPES))

    def __init__(self, wanted: Callable[[int], bool] | None = None) -> None:
        self.buffer = bytearray()
        self.messages: list[bytes] = []
        self.wanted = wanted or self.WANTED.__contains__

    def feed(self, chunk: bytes) -> bytes:
        self.buffer += chunk
        at = 0
        size = len(self.buffer)
        while size - at >= 5:
            end = at + 1 + int.from_bytes(self.buffer[at + 1 : at + 5], "big")
            if end > size:
                break
            if self.wanted(self.buffer[at]):
                self.messages.append(bytes(self.buffer[at:end]))
            at = end
        whole = bytes(self.buffer[:at])
        del self.buffer[:at]
        return whole


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    finally:
        writer.close()


async def _pipe_both(
    c_reader: asyncio.StreamReader,
    c_writer: asyncio.StreamWriter,
    s_reader: asyncio.StreamReader,
    s_writer: asyncio.StreamWriter,
) -> None:
    """Pass-through: bytes both ways until either side closes."""
    up = asyncio.create_task(_pipe(c_reader, s_writer))
    down = asyncio.create_task(_pipe(s_reader, c_writer))
    try:
        await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
