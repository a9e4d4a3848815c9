"""PostgreSQL logins for scenarios whose subject is the login: a SCRAM-SHA-256 verifier
with an iteration count of the scenario's choosing, and the method the server asks for.

``scram_verifier`` makes the verifier PostgreSQL stores for a password (RFC 5802/7677), so
``CREATE ROLE r LOGIN PASSWORD '<verifier>'`` gives a role whose every login costs the
client that many PBKDF2 rounds: any server since 10 stores a verifier given as the
password as it is (having the server make it, ``SET scram_iterations``, needs 16).
``auth_method`` reads how the server authenticates a user: the request it answers a
startup message with (what ``SYSTEM_USER`` names on 16 and later; this works on any
version).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import struct
import urllib.parse

from lab.aio import within
from lab.errors import ScenarioFailure

# the authentication request codes of the protocol's AuthenticationXXX messages
AUTH_REQUESTS = {0: "trust", 3: "password", 5: "md5", 7: "gss", 9: "sspi", 10: "scram-sha-256"}
PROTOCOL_3_0 = 196608
REPLY_S = 30.0  # the server answers a startup message at once; this bounds a hung one


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
