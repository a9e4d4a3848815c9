"""Where the gate connects (the server's DSN) and the DSN a client uses to reach it."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from lab.errors import LabError
from lab.gate.proxy import Upstream
from lab.spec.wire import parse_dsn

OURS = frozenset({"DATABASE_URL", "JDBC_DATABASE_URL"})  # what actor_env sets beside PG*


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


def actor_env(
    actor_port: int, user: str, database: str, passfile: Path, base: Mapping[str, str]
) -> dict[str, str]:
    """The environment an actor starts with: its own port of the gate in every form drivers
    read (PG*, DATABASE_URL, JDBC_DATABASE_URL); the password only in PGPASSFILE."""
    env = {k: v for k, v in base.items() if not k.startswith(("PG", "REDIS_")) and k not in OURS}
    env.update(
        PGHOST="127.0.0.1",
        PGPORT=str(actor_port),
        PGUSER=user,
        PGDATABASE=database,
        PGPASSFILE=str(passfile),
        DATABASE_URL=f"postgresql://{user}@127.0.0.1:{actor_port}/{database}",
        JDBC_DATABASE_URL=f"jdbc:postgresql://127.0.0.1:{actor_port}/{database}?user={user}",
    )
    return env


def call_dsn(actor_port: int, user: str, database: str, passfile: Path) -> str:
    """The DSN a function actor gets: its own port of the gate, the password in the
    passfile (libpq and asyncpg read `passfile` from the URI)."""
    where = quote(str(passfile), safe="/")
    return f"postgresql://{user}@127.0.0.1:{actor_port}/{database}?passfile={where}"


def redis_env(port: int) -> dict[str, str]:
    """An actor's own port of the Redis gate, as Redis clients read it (no password: the
    gate logs in for it)."""
    return {
        "REDIS_URL": f"redis://127.0.0.1:{port}/0",
        "REDIS_HOST": "127.0.0.1",
        "REDIS_PORT": str(port),
    }
