"""What a resolved server is, independent of where it came from."""

from __future__ import annotations

import socket
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lab.errors import LabError


@dataclass
class ServerInfo:
    """Printed at the start of every run and stored in every record (never a password)."""

    product: str  # postgresql | redis | pgbouncer
    kind: str  # embedded | docker | external
    version: str
    address: str
    source: str = ""  # where the binaries or the container image came from
    settings: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        src = f" ({self.source})" if self.source else ""
        return f"{self.product:<10} {self.kind:<8} {self.version:<8} {self.address}{src}"


@dataclass
class PgServer:
    """A PostgreSQL server the lab may create databases on."""

    info: ServerInfo
    dsn: str  # superuser DSN; holds secrets, never recorded
    log_path: Path | None = None  # server log the lab can read for deadlock reports
    bindir: Path | None = None  # where pgbench comes from, when known
    max_connections: int = 100
    logs: Callable[[], bytes] | None = None  # whole server log, when not a file (docker)
    pid: int = 0  # the postmaster, when the lab started it (watched during runs)

    def log_size(self) -> int:
        """Where the log ends now: read_log(from_offset) returns what came after."""
        if self.log_path is not None:
            return self.log_path.stat().st_size if self.log_path.exists() else 0
        return len(self.logs()) if self.logs is not None else 0

    def read_log(self, offset: int) -> str | None:
        """The server log written since `offset`, or None when the lab cannot read it."""
        if self.log_path is not None:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        if self.logs is not None:
            return self.logs()[offset:].decode(errors="replace")
        return None


@dataclass
class RedisServer:
    """A Redis server the lab may use under its own key prefix."""

    info: ServerInfo
    url: str
    pid: int = 0  # when the lab started it (watched during runs)


def free_port() -> int:
    """A loopback port that was free a moment ago (callers retry on collision)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


DEFAULT_PORTS = {"postgresql": 5432, "postgres": 5432, "redis": 6379, "rediss": 6379}


def check_answers(url: str, what: str, timeout: float = 3.0) -> None:
    """A server given by URL must accept a connection before the lab starts anything else
    (a closed port is one line now, not a failure in the middle of a run). Sockets given
    as a path are left to the client."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return
    port = parts.port or DEFAULT_PORTS[parts.scheme]
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise LabError(f"cannot reach {what} at {redact(url)}: {why.lower()}") from None


def redact(url: str) -> str:
    """host:port/db of a DSN or URL, without user or password (even when malformed)."""
    parts = urllib.parse.urlsplit(url)
    hostport = parts.netloc.rpartition("@")[2] or "localhost"
    path = parts.path if parts.path not in ("", "/") else ""
    return f"{parts.scheme}://{hostport}{path}"


def without_password(dsn: str) -> tuple[str, str | None]:
    """(the DSN without its password, the password): for a child process's command line,
    which anyone on the machine can read, the password goes through PGPASSWORD instead."""
    parts = urllib.parse.urlsplit(dsn)
    if parts.password is None:
        return dsn, None
    userinfo = parts.netloc.rpartition("@")[0].split(":", 1)[0]
    netloc = f"{userinfo}@{parts.netloc.rpartition('@')[2]}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), urllib.parse.unquote(
        parts.password
    )


def with_database(dsn: str, database: str) -> str:
    """The same DSN pointing at another database."""
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))


def check_url(url: str, schemes: tuple[str, ...], what: str) -> None:
    """Reject a malformed DSN or URL before anything tries to connect with it."""
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # raises ValueError on a non-numeric port
    except ValueError as exc:
        raise LabError(f"{what} {redact(url)!r} is malformed: {exc}") from None
    if parts.scheme not in schemes or not (parts.hostname or parts.path or parts.query):
        raise LabError(
            f"{what} {redact(url)!r} is malformed: expected {schemes[0]}://host:port/..."
        )
