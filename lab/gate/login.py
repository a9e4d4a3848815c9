"""The login actors get: the server's own, or one every driver can do.

The lab's embedded server stores its superuser's SCRAM verifier with 1 PBKDF2 round
(lab/servers/embedded.py: a verify opens thousands of connections). libpq, asyncpg,
node-postgres and pgx log in with it; pgjdbc's SCRAM library refuses it ("iteration must
be >= 4096"). Where the DSN's user is a superuser whose verifier has fewer rounds than
that, actors log in as a throwaway superuser of PostgreSQL's default rounds instead,
dropped at the end. Any other login (a user's own server, a role that cannot read
pg_authid) is given to actors as it is.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from urllib.parse import quote

import asyncpg

from lab.servers.pgauth import throwaway_role
from lab.spec.wire import parse_dsn

ROUNDS = 4096  # PostgreSQL's default scram_iterations, and the least pgjdbc takes
VERIFIER = re.compile(r"SCRAM-SHA-256\$(\d+):")


async def _rounds(conn: asyncpg.Connection) -> int | None:
    """The PBKDF2 rounds of the current user's SCRAM verifier (None: not SCRAM, or not
    readable: only a superuser reads pg_authid)."""
    try:
        secret = await conn.fetchval(
            "SELECT rolpassword FROM pg_authid WHERE rolname = current_user"
        )
    except asyncpg.PostgresError:
        return None
    found = VERIFIER.match(secret or "")
    return int(found.group(1)) if found else None


def as_user(dsn: str, user: str, password: str) -> str:
    """`dsn`'s server and database, logged in as `user` with `password`."""
    keys = parse_dsn(dsn)
    host, port = keys.get("host", "127.0.0.1"), keys.get("port", "5432")
    auth = f"{quote(user, safe='')}:{quote(password, safe='')}@"
    database = quote(keys.get("dbname", "postgres"), safe="")
    if host.startswith("/"):  # a socket folder: libpq's and asyncpg's query form
        return f"postgresql://{auth}/{database}?host={quote(host)}&port={port}"
    return f"postgresql://{auth}{host}:{port}/{database}"


@contextlib.asynccontextmanager
async def actor_login(dsn: str) -> AsyncIterator[str]:
    """The DSN (server's host and port, user and password) actors log in with."""
    conn = await asyncpg.connect(dsn)
    try:
        rounds = await _rounds(conn)
    finally:
        await conn.close()
    if rounds is None or rounds >= ROUNDS:
        yield dsn
        return
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    try:
        grants = ["ALTER ROLE {role} SUPERUSER"]  # actors ran as the lab's superuser
        async with throwaway_role(pool, ROUNDS, grants) as (role, secret):
            yield as_user(dsn, role, secret)
    finally:
        await pool.close()
