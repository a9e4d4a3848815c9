"""A small libpq: the simple-query protocol, parsed the way libpq parses it.

The isolation tester prints what libpq hands it: every value as the server's text, each
result of a multi-statement step, notices the moment libpq parses them (before the step's
line when they come before its first result). asyncpg decodes values and keeps no
notices in order, so the spec runner speaks the protocol itself: one blocking socket per
connection, read into an inbox and parsed only when the runner asks (``is_busy``,
``get_result``), as libpq parses only in ``PQisBusy`` and ``PQgetResult``.

A login is bounded (CONNECT_S); waiting for a query's results is not, as PQgetResult's
is not. The sequencer's sessions wait in the lab's event loop (``readable``,
``aget_result``, ``aexecute``): the same reads and the same parsing, without blocking the
other sessions.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import os
import secrets
import select
import socket
import struct
import unicodedata
import urllib.parse
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lab.errors import LabError

PROTOCOL_3_0 = 196608
CANCEL_CODE = 80877102
LOST = (
    "server closed the connection unexpectedly\n"
    "\tThis probably means the server terminated abnormally\n"
    "\tbefore or while processing the request.\n"
)
NO_CONNECTION = "no connection to the server\n"
CONNECT_S = 30.0  # a server that has not answered a login by then will not
DISPLAY_COLS, MIN_RIGHT_CUT = 60, 10  # libpq's error cursor: line width, room right of ^


@dataclass
class Result:
    """One PGresult: a command's status, a result set (text values, None for NULL) or an
    error (its fields by protocol code: S severity, M message, D detail...)."""

    kind: str  # "command", "tuples", "empty", "error"
    columns: list[str] = field(default_factory=list)
    rows: list[list[str | None]] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    query: str = ""  # the text sent, for an error's cursor line
    text: str = ""  # an error libpq made itself (the connection is gone): no fields

    def message(self) -> str:
        """PQresultErrorMessage: the error as libpq words it ("" for no error)."""
        if self.kind != "error" or self.text:
            return self.text
        return message_text(self.fields, self.query, is_error=True)


@dataclass
class Notify:
    channel: str
    payload: str
    pid: int


def error_fields(body: bytes) -> dict[str, str]:
    """An ErrorResponse or NoticeResponse body as {field code: text}."""
    out: dict[str, str] = {}
    for part in body.split(b"\0"):
        if part:
            out[chr(part[0])] = part[1:].decode("utf-8", "replace")
    return out


def message_text(fields: dict[str, str], query: str = "", is_error: bool = False) -> str:
    """libpq's message at its default verbosity: "SEVERITY:  text", the statement's line
    with a ``^`` under the error's position, then DETAIL, HINT, QUERY lines (CONTEXT only
    for an error), each ending in a newline."""
    sev = fields.get("S", "")
    out = f"{sev}:  {fields.get('M', '')}\n" if sev else f"{fields.get('M', '')}\n"
    if query and fields.get("P", "").isdigit():
        out += _position(query, int(fields["P"]) - 1)
    for code, label in (("D", "DETAIL"), ("H", "HINT"), ("q", "QUERY")):
        if code in fields:
            out += f"{label}:  {fields[code]}\n"
    if "W" in fields and is_error:
        out += f"CONTEXT:  {fields['W']}\n"
    return out


def _width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in "WF" else 1


def _position(query: str, loc: int) -> str:
    """libpq's "LINE n: ..." and its caret line for character `loc` (0-based) of `query`:
    the line holding it, cut to about DISPLAY_COLS columns around it ("..." where cut)."""
    text = query.replace("\t", " ")
    line, beg, end = 1, 0, len(text)
    for i, ch in enumerate(text):
        if ch in "\r\n":
            if i < loc:
                if ch == "\r" or i == 0 or text[i - 1] != "\r":
                    line += 1
                beg = i + 1
            else:
                end = i
                break
    if loc > end:
        return ""
    col = [0]
    for ch in text[:end]:
        col.append(col[-1] + _width(ch))
    cut_left = cut_right = False
    if col[end] - col[beg] > DISPLAY_COLS:
        if col[beg] + DISPLAY_COLS >= col[loc] + MIN_RIGHT_CUT:
            while col[end] - col[beg] > DISPLAY_COLS:
                end -= 1
            cut_right = True
        else:
            while col[loc] + MIN_RIGHT_CUT < col[end]:
                end -= 1
                cut_right = True
            while col[end] - col[beg] > DISPLAY_COLS:
                beg += 1
                cut_left = True
    head = f"LINE {line}: " + ("..." if cut_left else "")
    shown = head + text[beg:end] + ("..." if cut_right else "")
    return f"{shown}\n{' ' * (len(head) + col[loc] - col[beg])}^\n"


def parse_dsn(dsn: str) -> dict[str, str]:
    """A libpq URI (postgresql://user:pw@host:port/db?k=v) or key=value string as keys."""
    if "://" not in dsn:
        return dict(word.split("=", 1) for word in dsn.split() if "=" in word)
    url = urllib.parse.urlsplit(dsn)
    out = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
    for key, value in (
        ("user", url.username),
        ("password", url.password),
        ("host", url.hostname),
        ("port", str(url.port) if url.port else None),
        ("dbname", url.path.lstrip("/")),
    ):
        if value:
            out[key] = urllib.parse.unquote(value)
    return out


# Startup parameters libpq takes from the environment when the DSN does not give them
# (its PGOPTIONS, PGTZ, PGDATESTYLE, PGGEQO, PGCLIENTENCODING): pg_isolation_regress sets
# the time zone, date style and interval style of every spec this way.
STARTUP_ENV = (
    ("options", "PGOPTIONS"),
    ("TimeZone", "PGTZ"),
    ("datestyle", "PGDATESTYLE"),
    ("geqo", "PGGEQO"),
    ("client_encoding", "PGCLIENTENCODING"),
)


class PgConn:
    """One connection; `notice` is called with each notice's text as libpq formats it."""

    def __init__(
        self,
        dsn: str,
        notice: Callable[[str], None] | None = None,
        database: str = "",
        startup: Mapping[str, str] | None = None,
    ) -> None:
        self.params = parse_dsn(dsn)
        if database:
            self.params["dbname"] = database
        self.startup = dict(startup or {})  # sent at login as they are (any setting)
        self.notice = notice
        self.inbox: deque[tuple[str, bytes]] = deque()
        self._buf = b""
        self.state = "idle"  # libpq's asyncStatus: idle, busy, ready
        self._ready: Result | None = None  # the result parsed, not yet collected
        self._partial: Result | None = None
        self.notifies: deque[Notify] = deque()
        self.query = ""  # the last text sent
        self.closed = False  # the server hung up (libpq's CONNECTION_BAD)
        self.pid = self._secret = 0
        self.server: dict[str, str] = {}  # what the server reported at login
        host = self.params.get("host", "localhost")
        port = int(self.params.get("port", "5432"))
        try:
            if host.startswith("/"):
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.settimeout(CONNECT_S)
                self.sock.connect(f"{host}/.s.PGSQL.{port}")
            else:
                self.sock = socket.create_connection((host, port), CONNECT_S)
        except OSError as exc:
            raise LabError(f"PostgreSQL at {host}:{port}: {exc}") from None
        self.sock.settimeout(None)
        self._login()

    # --- the socket ---

    def _send(self, kind: bytes, body: bytes) -> None:
        self.sock.sendall(kind + struct.pack("!i", len(body) + 4) + body)

    def _split(self) -> None:
        while len(self._buf) >= 5:
            (size,) = struct.unpack("!i", self._buf[1:5])
            if len(self._buf) < size + 1:
                return
            self.inbox.append((chr(self._buf[0]), self._buf[5 : size + 1]))
            self._buf = self._buf[size + 1 :]

    def read(self, timeout: float | None) -> bool:
        """Wait up to `timeout` s (None: forever) for data, read what came; True if any."""
        if self.closed:
            return False
        # poll, not select: select() refuses a descriptor numbered 1024 or more
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        if not poller.poll(None if timeout is None else timeout * 1000):
            return False
        try:
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        self.feed(data)
        return True

    def feed(self, data: bytes) -> None:
        """Take bytes read from the server (b"": it hung up, libpq's "server closed the
        connection")."""
        if not data:
            self.closed = True
            return
        self._buf += data
        self._split()

    def _next(self) -> tuple[str, bytes]:
        while not self.inbox:
            if not self.read(CONNECT_S):
                raise LabError(f"PostgreSQL did not answer a login in {CONNECT_S:.0f} s")
            if self.closed and not self.inbox:
                raise LabError("PostgreSQL closed the connection during login")
        return self.inbox.popleft()

    # --- login ---

    def _login(self) -> None:
        user = self.params.get("user", "postgres")
        words = {"user": user, "database": self.params.get("dbname", user)}
        if app := self.params.get("application_name", os.environ.get("PGAPPNAME", "")):
            words["application_name"] = app
        for key, env in STARTUP_ENV:  # what libpq sends from its environment, if set
            if value := self.params.get(key, os.environ.get(env, "")):
                words[key] = value
        words.update(self.startup)
        body = b"".join(f"{k}\0{v}\0".encode() for k, v in words.items()) + b"\0"
        self.sock.sendall(struct.pack("!ii", len(body) + 8, PROTOCOL_3_0) + body)
        scram: _Scram | None = None
        while True:
            kind, msg = self._next()
            if kind == "E":
                raise LabError(f"PostgreSQL login: {error_fields(msg).get('M', '?')}")
            if kind == "K":
                self.pid, self._secret = struct.unpack("!ii", msg[:8])
            elif kind == "S":  # ParameterStatus: server_version, TimeZone, ...
                name, got, _ = msg.split(b"\0", 2)
                self.server[name.decode()] = got.decode()
            elif kind == "Z":
                return
            elif kind == "R":
                (code,) = struct.unpack("!i", msg[:4])
                password = self.params.get("password", "")
                if code == 3:
                    self._send(b"p", password.encode() + b"\0")
                elif code == 5:
                    inner = hashlib.md5((password + user).encode()).hexdigest().encode()
                    outer = hashlib.md5(inner + msg[4:8]).hexdigest()
                    self._send(b"p", f"md5{outer}".encode() + b"\0")
                elif code == 10:
                    scram = _Scram(password)
                    first = scram.first()
                    head = b"SCRAM-SHA-256\0" + struct.pack("!i", len(first))
                    self._send(b"p", head + first)
                elif code == 11 and scram is not None:
                    self._send(b"p", scram.final(msg[4:]))
                elif code not in (0, 12):
                    raise LabError(f"PostgreSQL login: authentication request {code}")

    # --- queries, parsed as libpq parses them ---

    def send_query(self, sql: str) -> bool:
        """PQsendQuery: the whole text as one simple Query message; False on a connection
        known to be gone. A failed write is left for the read to find, as libpq does (the
        server's last words may be waiting there)."""
        if self.closed:
            return False
        with contextlib.suppress(OSError):
            self._send(b"Q", sql.encode() + b"\0")
        self.state, self.query = "busy", sql
        return True

    def parse(self) -> None:
        """libpq's parseInput: take messages from the inbox while busy; notices and
        notifications at once in any state; stop at anything else once a result is ready."""
        if self.closed and not self.inbox and self.state == "busy":
            self._ready, self.state = Result("error", text=LOST), "ready"
        while self.inbox:
            kind, msg = self.inbox[0]
            if kind in "NA":
                self.inbox.popleft()
                if kind == "N":
                    if self.notice is not None:
                        self.notice(message_text(error_fields(msg), self.query))
                else:
                    (pid,) = struct.unpack("!i", msg[:4])
                    channel, payload = msg[4:].split(b"\0")[:2]
                    self.notifies.append(Notify(channel.decode(), payload.decode(), pid))
                continue
            if self.state != "busy":
                if self.state == "ready":
                    return
                self.inbox.popleft()  # idle: ParameterStatus and the like
                continue
            self.inbox.popleft()
            self._take(kind, msg)

    def _take(self, kind: str, msg: bytes) -> None:
        if kind == "T":
            (n,) = struct.unpack("!h", msg[:2])
            names, rest = [], msg[2:]
            for _ in range(n):
                name, rest = rest.split(b"\0", 1)
                names.append(name.decode("utf-8", "replace"))
                rest = rest[18:]
            self._partial = Result("tuples", columns=names)
        elif kind == "D" and self._partial is not None:
            (n,) = struct.unpack("!h", msg[:2])
            row: list[str | None] = []
            at = 2
            for _ in range(n):
                (size,) = struct.unpack("!i", msg[at : at + 4])
                at += 4
                row.append(None if size < 0 else msg[at : at + size].decode("utf-8", "replace"))
                at += max(size, 0)
            self._partial.rows.append(row)
        elif kind in "CIE":
            if kind == "C":
                done = self._partial or Result("command")
            else:
                fields = error_fields(msg)
                done = Result("empty" if kind == "I" else "error", fields=fields, query=self.query)
            self._partial = None
            self._ready, self.state = done, "ready"
        elif kind == "Z":
            self.state = "idle"

    def is_busy(self) -> bool:
        """PQisBusy: parse what has arrived; True while no result (nor the end) is ready."""
        self.parse()
        return self.state == "busy"

    def _next_result(self) -> tuple[bool, Result | None]:
        """Parse what has arrived: (True, the next result, or None once the query is
        done), or (False, None) while neither has come."""
        self.parse()
        if self.state == "ready":
            res, self._ready = self._ready, None
            self.state = "idle" if res is not None and res.text else "busy"
            return True, res
        return self.state == "idle", None

    def get_result(self) -> Result | None:
        """PQgetResult: the next result, waiting for it; None once the query is done."""
        while True:
            answered, res = self._next_result()
            if answered:
                return res
            self.read(None)

    def execute(self, sql: str) -> Result | None:
        """PQexec: send, collect every result, return the last."""
        if not self.send_query(sql):
            return Result("error", text=NO_CONNECTION)
        last = None
        while (res := self.get_result()) is not None:
            last = res
        return last

    # --- the same, waiting in the event loop ---

    async def recv(self) -> bytes:
        """Wait in the event loop until the server sends something: what it sent (b"": it
        hung up)."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        fd = self.sock.fileno()
        if fd < 0:
            return b""

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        try:
            return self.sock.recv(65536)
        except OSError:
            return b""

    async def readable(self) -> None:
        """`read`, waiting in the event loop."""
        if not self.closed:
            self.feed(await self.recv())

    async def aget_result(self) -> Result | None:
        """`get_result`, waiting in the event loop."""
        while True:
            answered, res = self._next_result()
            if answered:
                return res
            await self.readable()

    async def aexecute(self, sql: str) -> Result | None:
        """`execute`, waiting in the event loop."""
        if not self.send_query(sql):
            return Result("error", text=NO_CONNECTION)
        last = None
        while (res := await self.aget_result()) is not None:
            last = res
        return last

    def cancel(self) -> None:
        """PQcancelBlocking: a CancelRequest on a connection of its own; the server hangs
        up once it has signalled the backend."""
        peer = self.sock.getpeername()
        family = self.sock.family
        with socket.socket(family) as s:
            s.settimeout(CONNECT_S)
            s.connect(peer)
            s.sendall(struct.pack("!iiii", 16, CANCEL_CODE, self.pid, self._secret))
            while s.recv(64):
                pass

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._send(b"X", b"")
        self.sock.close()


class _Scram:
    """The client side of SCRAM-SHA-256 (RFC 5802/7677), without channel binding."""

    def __init__(self, password: str) -> None:
        self.password = password
        self.nonce = base64.b64encode(secrets.token_bytes(18)).decode()
        self.bare = f"n=,r={self.nonce}"

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
        salt, rounds = base64.b64decode(attrs["s"]), int(attrs["i"])
        salted = hashlib.pbkdf2_hmac("sha256", self.password.encode(), salt, rounds)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        without_proof = f"c=biws,r={attrs['r']}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.digest(hashlib.sha256(client_key).digest(), auth, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
