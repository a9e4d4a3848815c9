"""The pytest plugin, run the way a user runs it: a small suite of their own, in pytester."""

from __future__ import annotations

import pytest

from lab.servers import Servers

pytest_plugins = ["pytester"]

EXAMPLE_SUITE = """
import asyncio

import asyncpg
import pytest
import redis


def test_fresh_database(locklab_pg_dsn):
    async def main():
        conn = await asyncpg.connect(locklab_pg_dsn)
        try:
            tables = await conn.fetchval(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            await conn.execute("CREATE TABLE stock (sku text PRIMARY KEY, qty int)")
            return tables, await conn.fetchval("SELECT current_database()")
        finally:
            await conn.close()

    tables, name = asyncio.run(main())
    assert tables == 0  # fresh: the other test's table is not here
    assert name.startswith("locklab_test_")


def test_fresh_database_again(locklab_pg_dsn):
    test_fresh_database(locklab_pg_dsn)


@pytest.mark.asyncio
async def test_connection(locklab_pg):
    assert await locklab_pg.fetchval("SELECT 1") == 1


def test_redis_prefix(locklab_redis_url, locklab_redis_prefix):
    client = redis.Redis.from_url(locklab_redis_url)
    client.set(locklab_redis_prefix + "lock", "me")
    assert client.get(locklab_redis_prefix + "lock") == b"me"
    with open("prefixes.txt", "a") as f:
        f.write(locklab_redis_prefix + "\\n")
    client.close()
"""


def _external(monkeypatch: pytest.MonkeyPatch, servers: Servers) -> None:
    """The example suite uses this session's servers as external ones (no second start)."""
    assert servers.pg is not None and servers.redis is not None
    monkeypatch.setenv("LOCKLAB_PG_DSN", servers.pg.dsn)
    monkeypatch.setenv("LOCKLAB_REDIS_URL", servers.redis.url)


def test_example_suite_gets_servers_databases_and_prefixes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, servers: Servers
) -> None:
    """A user's suite: each test a fresh database, a Redis prefix whose keys are gone after."""
    import redis

    _external(monkeypatch, servers)
    pytester.makepyfile(test_example=EXAMPLE_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    prefix = (pytester.path / "prefixes.txt").read_text().strip()
    assert servers.redis is not None
    client = redis.Redis.from_url(servers.redis.url)
    try:
        assert client.keys(prefix + "*") == []  # deleted after the test
    finally:
        client.close()


def test_no_servers_is_one_clear_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No reachable server: every test errors with one `locklab:` line, no traceback."""
    monkeypatch.setenv("LOCKLAB_PG_DSN", "postgresql://postgres:x@127.0.0.1:1/postgres")
    monkeypatch.setenv("LOCKLAB_REDIS_URL", "redis://127.0.0.1:1/0")
    pytester.makepyfile(test_example=EXAMPLE_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=4)
    text = result.stdout.str()
    assert "Traceback" not in text
    assert "During handling" not in text
    # checked before anything starts (lab/servers/base.py check_answers), the first one
    dsn = "postgresql://127.0.0.1:1/postgres"
    assert f"cannot reach PostgreSQL at {dsn}: connection refused" in text
    assert "x@" not in text  # the password never shows


def test_bad_server_mode_is_one_clear_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Servers that cannot be resolved at all: the session fixture's one line."""
    for var in ("LOCKLAB_PG_DSN", "LOCKLAB_REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LOCKLAB_SERVERS", "external")
    pytester.makepyfile(test_example=EXAMPLE_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(
        ["*locklab: no servers for this test session: LabError: LOCKLAB_SERVERS=external needs*"]
    )


def test_factories_give_servers_of_a_chosen_version(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """servers_fixture / pg_dsn_fixture, as pytest-postgresql's factories: a suite's own
    fixture for another PostgreSQL version, with a fresh database per test on it."""
    from lab.servers.versions import pg_available

    for var in ("LOCKLAB_PG_DSN", "LOCKLAB_REDIS_URL"):  # a version is a server it starts
        monkeypatch.delenv(var, raising=False)

    other = pg_available()[-1]  # not the default build, when there are several
    pytester.makeconftest(
        f"""
from lab.pytest_plugin import ServerNeeds, pg_dsn_fixture, servers_fixture

other_pg = servers_fixture(pg_version="{other.version}", needs=ServerNeeds(redis=False))
other_pg_dsn = pg_dsn_fixture("other_pg")
"""
    )
    pytester.makepyfile(
        test_other=f"""
import asyncio

import asyncpg


def test_version(other_pg, other_pg_dsn):
    async def main():
        conn = await asyncpg.connect(other_pg_dsn)
        try:
            return await conn.fetchval("SHOW server_version")
        finally:
            await conn.close()

    assert asyncio.run(main()).startswith("{other.version}")
    assert other_pg.pg.info.version == "{other.version}" and other_pg.redis is None
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
