"""locklab's pytest plugin: real servers resolved the lab's way, a fresh database and a Redis
key prefix per test.

Loaded in any pytest run where locklab is installed (the ``pytest11`` entry point). The
shape follows pytest-postgresql: one session-scoped fixture owns the servers (started
from binaries, or an existing server when a DSN is given: its ``proc`` and ``noproc``),
and per-test fixtures hand out a fresh database on it. The servers come from the same
function the ``locklab`` command uses (DSN -> kept -> embedded; Docker when asked)::

    def test_checkout(locklab_pg_dsn, locklab_redis_url, locklab_redis_prefix): ...

``locklab_interleavings`` runs the test's own session coroutines under a schedule or
every interleaving and asserts an invariant (lab/testing.py).

Override ``locklab_server_needs`` in a conftest.py to ask for less (no Redis) or more
(PgBouncer). Without reachable servers every fixture fails with one line, no traceback.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import secrets
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import asyncpg
import pytest

from lab.errors import LabError
from lab.servers import Servers
from lab.servers.base import redact, with_database

if TYPE_CHECKING:
    from lab.testing import LocklabInterleavings

T = TypeVar("T")

# What a fixture may meet when the servers are not there: one line, never a traceback.
SETUP_ERRORS = (LabError, OSError, subprocess.SubprocessError, asyncpg.PostgresError, ValueError)


@dataclass(frozen=True)
class ServerNeeds:
    """Which servers the session's ``locklab_servers`` resolves (override the fixture)."""

    pg: bool = True
    redis: bool = True
    pgbouncer: bool = False


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("locklab", "locklab servers (also LOCKLAB_* environment variables)")
    group.addoption("--locklab-pg-dsn", help="PostgreSQL superuser DSN (env LOCKLAB_PG_DSN).")
    group.addoption("--locklab-redis-url", help="Redis URL (env LOCKLAB_REDIS_URL).")
    group.addoption("--locklab-pg-version", help="PostgreSQL version to start (`locklab doctor`).")
    group.addoption("--locklab-redis-version", help="Redis version to start (`locklab doctor`).")


def _setup_failed(what: str, exc: BaseException) -> NoReturn:
    pytest.fail(f"locklab: {what}: {type(exc).__name__}: {exc}", pytrace=False)


def _in_thread(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion on its own loop in another thread, so that a sync
    fixture works whether or not the test's event loop is running."""

    async def main() -> T:
        return await make()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


@pytest.fixture(scope="session")
def locklab_server_needs() -> ServerNeeds:
    """PostgreSQL and Redis; override in a conftest.py to change it."""
    return ServerNeeds()


def _resolve(
    needs: ServerNeeds,
    pg_dsn: str | None = None,
    redis_url: str | None = None,
    pg_version: str | None = None,
    redis_version: str | None = None,
) -> Iterator[Servers]:
    """Servers resolved as `locklab run` resolves them, stopped when the generator closes."""
    from lab.servers.versions import open_for

    failed: BaseException | None = None
    try:
        srv = open_for(
            pg_dsn,
            redis_url,
            pg_version,
            redis_version,
            need_pg=needs.pg,
            need_redis=needs.redis,
            need_pgbouncer=needs.pgbouncer,
        )
    except SETUP_ERRORS as exc:
        failed = exc
    if failed is not None:  # outside the except block: no chained traceback in the report
        _setup_failed("no servers for this test session", failed)
    with srv:
        yield srv


@pytest.fixture(scope="session")
def locklab_servers(
    request: pytest.FixtureRequest, locklab_server_needs: ServerNeeds
) -> Iterator[Servers]:
    """The session's servers, resolved as `locklab run` resolves them; stopped at exit."""
    opt = request.config.getoption
    yield from _resolve(
        locklab_server_needs,
        opt("--locklab-pg-dsn"),
        opt("--locklab-redis-url"),
        opt("--locklab-pg-version"),
        opt("--locklab-redis-version"),
    )


def servers_fixture(
    pg_version: str | None = None,
    redis_version: str | None = None,
    needs: ServerNeeds = ServerNeeds(),
) -> Any:
    """A factory of session fixtures for servers of given versions, as pytest-postgresql's
    ``factories.postgresql_proc(...)``; in a conftest.py::

        pg15 = servers_fixture(pg_version="15", needs=ServerNeeds(redis=False))
        pg15_dsn = pg_dsn_fixture("pg15")
    """

    @pytest.fixture(scope="session")
    def fixture() -> Iterator[Servers]:
        yield from _resolve(needs, pg_version=pg_version, redis_version=redis_version)

    return fixture


def pg_dsn_fixture(servers_fixture_name: str) -> Any:
    """A factory of per-test fresh-database fixtures on the servers of another fixture
    (pytest-postgresql's ``factories.postgresql("proc_fixture_name")``)."""

    @pytest.fixture
    def fixture(request: pytest.FixtureRequest) -> Iterator[str]:
        yield from _fresh_database(request.getfixturevalue(servers_fixture_name))

    return fixture


def _pg_dsn(servers: Servers) -> str:
    if servers.pg is None:
        pytest.fail(
            "locklab: this session resolved no PostgreSQL (locklab_server_needs)", pytrace=False
        )
    return servers.pg.dsn


@pytest.fixture
def locklab_pg_dsn(locklab_servers: Servers) -> Iterator[str]:
    """A DSN of a fresh database, created for this test and dropped after it."""
    yield from _fresh_database(locklab_servers)


def _fresh_database(servers: Servers) -> Iterator[str]:
    admin_dsn = _pg_dsn(servers)
    name = f"locklab_test_{secrets.token_hex(6)}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(admin_dsn, timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    failed: BaseException | None = None
    try:
        _in_thread(lambda: admin(f'CREATE DATABASE "{name}"'))
    except SETUP_ERRORS as exc:
        failed = exc
    if failed is not None:
        _setup_failed(f"cannot create a database on {redact(admin_dsn)}", failed)
    try:
        yield with_database(admin_dsn, name)
    finally:
        _in_thread(lambda: admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


try:
    import pytest_asyncio
except ImportError:  # the async connection fixture needs pytest-asyncio; the DSN one does not
    pass
else:

    @pytest_asyncio.fixture
    async def locklab_pg(locklab_pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
        """An asyncpg connection to this test's fresh database (needs pytest-asyncio)."""
        conn = await asyncpg.connect(locklab_pg_dsn, timeout=10)
        try:
            yield conn
        finally:
            await conn.close()


@pytest.fixture
def locklab_interleavings(locklab_pg_dsn: str) -> LocklabInterleavings:
    """Run session coroutines under a schedule (``await .run(setup, sessions, schedule,
    invariant)``) or every interleaving of their steps (``await .every(setup, sessions,
    steps, invariant)``, then ``.assert_kept()``) on this test's fresh database
    (lab/testing.py)."""
    from lab.testing import LocklabInterleavings

    return LocklabInterleavings(locklab_pg_dsn)


@pytest.fixture
def locklab_redis_url(locklab_servers: Servers) -> str:
    """The session's Redis (share it through ``locklab_redis_prefix``)."""
    if locklab_servers.redis is None:
        pytest.fail("locklab: this session resolved no Redis (locklab_server_needs)", pytrace=False)
    return locklab_servers.redis.url


@pytest.fixture
def locklab_redis_prefix(locklab_redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted after the test."""
    import redis

    prefix = f"locklab-test:{secrets.token_hex(6)}:"
    client: Any = redis.Redis.from_url(locklab_redis_url, socket_timeout=10)
    failed: BaseException | None = None
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        failed = exc
    if failed is not None:
        client.close()
        _setup_failed(f"cannot reach Redis at {redact(locklab_redis_url)}", failed)
    try:
        yield prefix
    finally:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
