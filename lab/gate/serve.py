"""`locklab gate`: the gate on its own, in front of a server, until Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO
from urllib.parse import unquote, urlsplit

from lab.errors import LabError
from lab.gate.dsn import gate_dsn, redis_env, upstream_of
from lab.gate.login import actor_login
from lab.gate.proxy import Gate
from lab.gate.redisgate import RedisGate
from lab.procs.lifecycle import folder_of, make_base_dir, remove_base_dir
from lab.spec.wire import parse_dsn


def client_env(dsn: str, port: int, passfile: Path) -> dict[str, str]:
    """What a client is given to reach the server through the gate: libpq's PG* names,
    DATABASE_URL and JDBC_DATABASE_URL (pgjdbc reads neither PG* nor DATABASE_URL); the
    password only in a private password file (PGPASSFILE), never on the screen."""
    keys = parse_dsn(dsn)
    user = keys.get("user", os.environ.get("USER", "postgres"))
    database = keys.get("dbname", user)
    url = gate_dsn(f"postgresql://{user}@x/{database}", port)
    return {
        "PGHOST": "127.0.0.1",
        "PGPORT": str(port),
        "PGUSER": user,
        "PGDATABASE": database,
        "PGPASSFILE": str(passfile),
        "DATABASE_URL": url,
        "JDBC_DATABASE_URL": f"jdbc:postgresql://127.0.0.1:{port}/{database}?user={user}",
    }


@contextlib.contextmanager
def password_file(dsn: str, port: int | None) -> Iterator[Path]:
    """A .pgpass for the gate's port (None: any port of 127.0.0.1) in a lab folder of this
    process (0700; removed at the end, or by the lab's reaper after a SIGKILL)."""
    keys = parse_dsn(dsn)
    base = make_base_dir()
    path = folder_of(base) / "gate.pgpass"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)

    def escaped(value: str) -> str:
        return value.replace("\\", "\\\\").replace(":", "\\:")

    line = f"127.0.0.1:{port or '*'}:*:{escaped(keys.get('user', '*'))}:{escaped(keys.get('password', ''))}"
    with os.fdopen(fd, "w") as out:
        out.write(line + "\n")
    try:
        yield path
    finally:
        remove_base_dir(base)


async def serve(
    dsn: str,
    port: int,
    log: TextIO | None,
    say: Callable[[str], None],
    redis: tuple[str, int] | None = None,
) -> None:
    """Serve the gate in front of `dsn` on 127.0.0.1:`port` until cancelled (Ctrl-C); with
    `redis` (its URL, with the password the gate logs in with, and a port), a Redis gate
    too."""
    gate = Gate(upstream_of(dsn), log=log)
    rgate = None
    try:
        await gate.start(port)
        if redis is not None:
            where = urlsplit(redis[0])
            secret = unquote(where.password or "")
            rgate = RedisGate(where.hostname or "127.0.0.1", where.port or 6379, secret, None, log)
            rport = await rgate.start(port=redis[1])
    except OSError as exc:
        raise LabError(f"the gate cannot listen on 127.0.0.1: {exc.strerror}") from None
    try:
        async with actor_login(dsn) as login:
            with password_file(login, gate.port) as passfile:
                env = client_env(login, gate.port, passfile)
                say(f"gate: 127.0.0.1:{gate.port} -> {_where(dsn)}; Ctrl-C stops it")
                if rgate is not None:
                    env |= redis_env(rport)
                    say(f"redis gate: 127.0.0.1:{rport} -> {where.hostname}:{where.port}")
                say("point a client at it (the password is in PGPASSFILE):")
                say("  export " + " ".join(f"{k}={v}" for k, v in env.items()))
                await asyncio.Event().wait()
    finally:
        await gate.close()
        if rgate is not None:
            await rgate.close()


def _where(dsn: str) -> str:
    up = upstream_of(dsn)
    return f"{up.host}:{up.port}" if not up.host.startswith("/") else f"socket in {up.host}"
