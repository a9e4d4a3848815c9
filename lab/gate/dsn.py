"""Where the gate connects (the server's DSN) and the DSN a client uses to reach it."""

from __future__ import annotations

import urllib.parse

from lab.errors import LabError
from lab.gate.proxy import Upstream
from lab.spec.wire import parse_dsn


def upstream_of(dsn: str) -> Upstream:
    """The server a DSN names: its host (or socket folder) and port."""
    keys = parse_dsn(dsn)
    host = keys.get("host", "").split(",")[0] or "/var/run/postgresql"
    try:
        port = int(keys.get("port", "5432").split(",")[0])
    except ValueError:
        raise LabError(f"the PostgreSQL DSN's port is not a number: {keys['port']!r}") from None
    return Upstream(host, port)


def gate_dsn(dsn: str, port: int, database: str | None = None) -> str:
    """`dsn` with its host and port replaced by the gate's (and its database, if given):
    the same user and password, for the server to check through the gate."""
    keys = parse_dsn(dsn)
    user = urllib.parse.quote(keys.get("user", ""), safe="")
    password = keys.get("password")
    auth = f"{user}:{urllib.parse.quote(password, safe='')}@" if password else f"{user}@"
    name = urllib.parse.quote(database or keys.get("dbname", ""), safe="")
    return f"postgresql://{auth if user else ''}127.0.0.1:{port}/{name}"
