"""PostgreSQL logins for scenarios whose subject is the login: a SCRAM-SHA-256 verifier
with an iteration count of the scenario's choosing, and the method the server asks for.

``scram_verifier`` makes the verifier PostgreSQL stores for a password (RFC 5802/7677), so
``CREATE ROLE r LOGIN PASSWORD '<verifier>'`` gives a role whose every login costs the
client that many PBKDF2 rounds: any server since 10 stores a verifier given as the
password as it is (having the server make it, ``SET scram_iterations``, needs 16).
``auth_method`` reads how the server authenticates a user: the request it answers a
startup message with (what ``SYSTEM_USER`` names on 16 and later; this works on any
version). ``throwaway_role`` is a login of a run's own: a role with a random password
and the iteration count asked for, dropped when the run is done with it. A lab killed
with SIGKILL runs no `finally`: each role's comment names the process and host that made
it, and the next throwaway_role on that server drops the roles of this host's dead labs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import os
import re
import secrets
import socket
import struct
import urllib.parse
from collections.abc import AsyncIterator, Sequence

import asyncpg

from lab.aio import within
from lab.errors import ScenarioFailure

# the authentication request codes of the protocol's AuthenticationXXX messages
AUTH_REQUESTS = {0: "trust", 3: "password", 5: "md5", 7: "gss", 9: "sspi", 10: "scram-sha-256"}
PROTOCOL_3_0 = 196608
REPLY_S = 30.0  # the server answers a startup message at once; this bounds a hung one
ROLE_PREFIX = "locklab_scram"  # throwaway roles; TCP logins do SCRAM on the embedded server
SET_SECRET = "UPDATE pg_authid SET rolpassword = $1 WHERE rolname = $2"
OWNER = re.compile(r"locklab pid=(\d+) host=(\S+)$")  # a throwaway role's comment
MADE_HERE = """SELECT rolname, shobj_description(oid, 'pg_authid') AS owner FROM pg_roles
  WHERE starts_with(rolname, $1)"""


def scram_verifier(password: str, iterations: int) -> str:
    """The SCRAM-SHA-256 verifier of `password`, made with `iterations` rounds of PBKDF2."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    stored = hashlib.sha256(hmac.digest(salted, b"Client Key", "sha256")).digest()
    server = hmac.digest(salted, b"Server Key", "sha256")
    b64 = [base64.b64encode(b).decode() for b in (salt, stored, server)]
    return f"SCRAM-SHA-256${iterations}:{b64[0]}${b64[1]}:{b64[2]}"


async def auth_method(dsn: str, database: str, user: str = "", seconds: float = REPLY_S) -> str:
    """How the server at `dsn` authenticates `user` (default: the DSN's) on `database`:
    "trust" when it asks nothing (also peer, ident, cert), "scram-sha-256", "md5", ...
    The probe hangs up before answering, which the server takes silently; a server that
    refuses the startup message is a ScenarioFailure naming the user and its reply."""
    url = urllib.parse.urlsplit(dsn)
    user = user or urllib.parse.unquote(url.username or "")
    query = urllib.parse.parse_qs(url.query)  # libpq's ?host=/socket/dir&port=N form
    port = url.port or int(query.get("port", ["5432"])[0])
    host = url.hostname or query.get("host", [""])[0]
    if host.startswith("/"):
        reader, writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
    else:
        reader, writer = await asyncio.open_connection(host or "localhost", port)
    try:
        body = b"".join(f"{k}\0{v}\0".encode() for k, v in (("user", user), ("database", database)))
        writer.write(struct.pack("!ii", 9 + len(body), PROTOCOL_3_0) + body + b"\0")
        kind, size = struct.unpack("!ci", await within(reader.readexactly(5), seconds))
        reply = await within(reader.readexactly(size - 4), seconds)
    finally:
        writer.close()
    if kind != b"R":
        raise ScenarioFailure(f"the server refused a startup message for {user!r}: {reply!r}")
    (code,) = struct.unpack("!i", reply[:4])
    return AUTH_REQUESTS.get(code, f"auth request {code}")


def _host() -> str:
    return re.sub(r"[^\w.-]", "_", socket.gethostname())  # safe inside a literal


def _owner() -> str:
    """The comment a throwaway role carries: who made it, so a later run can tell it is stale."""
    return f"locklab pid={os.getpid()} host={_host()}"


def _gone(owner: str) -> bool:
    """A role's maker was a lab process of this host that no longer runs."""
    made = OWNER.match(owner or "")
    if made is None or made[2] != _host():
        return False  # not ours to judge: another host's lab may still use it
    try:
        os.kill(int(made[1]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # it runs, as another user
        return False
    return False


async def _drop_stale(db: asyncpg.Pool) -> None:
    """Drop the throwaway roles a SIGKILLed lab of this host left behind."""
    for row in await db.fetch(MADE_HERE, f"{ROLE_PREFIX}_"):
        if _gone(row["owner"]):
            with contextlib.suppress(asyncpg.PostgresError):
                await db.execute(f'DROP OWNED BY "{row["rolname"]}"')
                await db.execute(f'DROP ROLE "{row["rolname"]}"')


@contextlib.asynccontextmanager
async def throwaway_role(
    db: asyncpg.Pool, iterations: int, grants: Sequence[str] = ()
) -> AsyncIterator[tuple[str, str]]:
    """(role, password) of a new LOGIN role whose SCRAM verifier has `iterations` rounds,
    with `grants` run for it ("GRANT SELECT ON t TO {role}"); dropped on the way out.
    `db` connects as a superuser: the verifier is written into pg_authid."""
    role = f"{ROLE_PREFIX}_{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(16)  # [A-Za-z0-9_-]: safe inside any literal
    verifier = await asyncio.to_thread(scram_verifier, password, iterations)
    await _drop_stale(db)
    async with db.acquire() as conn, conn.transaction():
        await conn.execute(f"CREATE ROLE {role} LOGIN")
        await conn.execute(f"COMMENT ON ROLE {role} IS '{_owner()}'")
        # Not CREATE ROLE ... PASSWORD: it checks the secret against the empty password, a
        # PBKDF2 of the secret's own iterations in the server (0.81 s at 600,000 here, in
        # each slow-login run). The same secret goes into the catalog as the superuser.
        await conn.execute(SET_SECRET, verifier, role)
        for grant in grants:
            await conn.execute(grant.format(role=role))
    try:
        yield role, password
    finally:
        with contextlib.suppress(asyncpg.PostgresError):
            await db.execute(f"DROP OWNED BY {role}")
            await db.execute(f"DROP ROLE {role}")
