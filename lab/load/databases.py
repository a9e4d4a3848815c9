"""The run databases on the PostgreSQL server: one per scenario x variant, made (or renamed
from a spare) ahead of the variant, dropped after it, swept after a lane died; the
superuser connection that does it and the server probe before each variant."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re

import asyncpg

from lab.aio import until
from lab.errors import LabError, ScenarioFailure
from lab.servers import Servers

# Empty databases a plan made during its last variant for the next plan's first variant
# (verify runs its plans one after another, each in an event loop of its own), by the
# DSN of their server; renamed to the variant's name when taken (1 ms, CREATE 50-300 ms).
SPARES: dict[str, list[str]] = {}


def create_statement(servers: Servers, database: str) -> str:
    """CREATE DATABASE of a run's database. From PostgreSQL 15 on, the default strategy
    (WAL_LOG) copies the template through shared buffers and writes it all to the WAL
    (~7.5 MB a database), which the checkpointer then writes out again; FILE_COPY copies
    the template's files but checkpoints before and after. So FILE_COPY only on a server
    the lab started itself with fsync off, where a checkpoint is cheap; a user's own
    server keeps its default."""
    pg = servers.pg
    version = pg.info.version if pg is not None else ""
    major = int(version.split(".")[0]) if version[:1].isdigit() else 0
    no_fsync = pg is not None and pg.info.settings.get("fsync") == "off"
    strategy = " STRATEGY = FILE_COPY" if major >= 15 and no_fsync else ""
    return f'CREATE DATABASE "{database}"{strategy}'


async def create_database(servers: Servers, database: str, deadlock_timeout_ms: int) -> str:
    """CREATE DATABASE (~50-300 ms here) on a connection of its own, so that the next
    variant's database is made while this one runs; its name when done."""
    admin = await admin_connect(servers)
    try:
        await admin.execute(create_statement(servers, database))
        await set_deadlock_timeout(admin, database, deadlock_timeout_ms)
    finally:
        await admin.close()
    return database


async def set_deadlock_timeout(admin: asyncpg.Connection, database: str, ms: int) -> None:
    """Give `database` the run's deadlock_timeout, for every session opened on it."""
    await admin.execute(f"ALTER DATABASE \"{database}\" SET deadlock_timeout = '{int(ms)}ms'")


def server_key(servers: Servers) -> str:
    return servers.pg.dsn if servers.pg is not None else ""


async def take_spare(admin: asyncpg.Connection, servers: Servers, database: str) -> bool:
    """Rename a spare database made by the plan before to `database`; False when there is
    none (or it cannot be renamed: then it is dropped and the caller creates one)."""
    spares = SPARES.get(server_key(servers), [])
    while spares:
        spare = spares.pop()
        try:
            await admin.execute(f'ALTER DATABASE "{spare}" RENAME TO "{database}"')
            return True
        except Exception:
            with contextlib.suppress(Exception):
                await admin.execute(f'DROP DATABASE IF EXISTS "{spare}" WITH (FORCE)')
    return False


CREATES_S = 10.0  # a CREATE DATABASE takes 40-300 ms here


CREATING = (
    "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND state = 'active'"
    " AND query ILIKE 'CREATE DATABASE%' AND position($1 in query) > 0"
)


async def drop_run_databases(servers: Servers, run_id: str) -> list[str]:
    """Drop every database of the run `run_id` still on the server (a lane process killed
    mid-run cannot drop its own); the names dropped."""
    if servers.pg is None:
        return []
    prefix = database_name(run_id, "", "")[: -len("__")] + "_"
    admin = await admin_connect(servers)
    try:
        # a CREATE DATABASE the killed process sent goes on without it: wait until none of
        # the run's is under way, or the database it makes would outlive this sweep
        async def no_creates() -> bool:
            busy = await admin.fetchval(CREATING, prefix)
            return not busy

        with contextlib.suppress(ScenarioFailure):
            await until(no_creates, CREATES_S, "the run's CREATE DATABASE to end", every=0.02)
        names = [
            str(r["datname"])
            for r in await admin.fetch(
                "SELECT datname FROM pg_database WHERE left(datname, $1) = $2",
                len(prefix),
                prefix,
            )
        ]
        for name in names:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
    return names


async def drop_spares(servers: Servers) -> None:
    """Drop the spare databases left for plans that did not come (verify's end)."""
    spares = SPARES.pop(server_key(servers), [])
    if not spares or servers.pg is None:
        return
    admin = await admin_connect(servers)
    try:
        for spare in spares:
            with contextlib.suppress(Exception):
                await admin.execute(f'DROP DATABASE IF EXISTS "{spare}" WITH (FORCE)')
    finally:
        await admin.close()


async def drop_made(servers: Servers, task: asyncio.Task[str]) -> None:
    """Drop a database made ahead (or being made: once its CREATE has ended either way)."""
    database = task.get_name()
    with contextlib.suppress(BaseException):
        await task
    with contextlib.suppress(Exception):
        admin = await admin_connect(servers)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        finally:
            await admin.close()


def database_name(run_id: str, scenario: str, variant: str) -> str:
    """A database name of at most 63 characters, distinct per variant even when cut
    (two variants' databases exist at once while the next one is made ahead)."""
    raw = re.sub(r"[^a-z0-9_]", "_", f"locklab_{run_id}_{scenario}_{variant}".lower())
    if len(raw) <= 63:
        return raw
    return f"{raw[:54]}_{hashlib.sha1(raw.encode()).hexdigest()[:8]}"


async def admin_connect(servers: Servers) -> asyncpg.Connection:
    """The superuser connection; an unreachable or refusing server becomes one clear line."""
    assert servers.pg is not None
    try:
        return await asyncpg.connect(servers.pg.dsn, timeout=10)
    except (TimeoutError, OSError) as exc:
        msg = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise LabError(f"cannot reach PostgreSQL at {servers.pg.info.address}: {msg}") from None
    except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise LabError(f"PostgreSQL at {servers.pg.info.address} refused: {exc}") from None


async def probe_pg(conn: asyncpg.Connection, servers: Servers) -> int:
    """Fill in the server's version and return how many more connections it accepts."""
    assert servers.pg is not None
    row = await conn.fetchrow(  # one round trip: this runs before every variant
        "SELECT current_setting('server_version') AS version,"
        " current_setting('max_connections')::int AS max_conn,"
        " current_setting('superuser_reserved_connections')::int AS reserved,"
        " (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int"
        " AS in_use"
    )
    assert row is not None
    servers.pg.info.version = str(row["version"]).split()[0]
    max_conn, reserved, in_use = int(row["max_conn"]), int(row["reserved"]), int(row["in_use"])
    servers.pg.max_connections = max_conn
    return max_conn - reserved - in_use


# every backend still on a database, ended and waited for (5 s each at most)
GONE = "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = $1"
