"""lab.servers.pgauth on the real server: a lab-made SCRAM verifier, and the login method read
from the server's first reply."""

from __future__ import annotations

import asyncio
import os
import sys
import urllib.parse
from typing import Any

import asyncpg
import pytest

from lab.servers import Servers, pgauth
from lab.servers.pgauth import ROLE_PREFIX, auth_method, scram_verifier, throwaway_role


async def test_the_lab_made_scram_verifier_is_the_servers_own(servers: Servers) -> None:
    """The verifier the lab computes (any server version takes it) is stored with its
    iteration count, lets the password in and keeps a wrong one out."""
    assert servers.pg is not None
    admin = await asyncpg.connect(servers.pg.dsn)
    role = f"locklab_scram_test_{os.getpid()}"  # the run leaves no locklab_scram* role
    try:
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{scram_verifier('pw-1', 5000)}'")
        stored = await admin.fetchval("SELECT rolpassword FROM pg_authid WHERE rolname = $1", role)
        assert stored.startswith("SCRAM-SHA-256$5000:")
        conn = await asyncpg.connect(servers.pg.dsn, user=role, password="pw-1")
        assert await conn.fetchval("SELECT current_user") == role
        await conn.close()
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(servers.pg.dsn, user=role, password="pw-2")
    finally:
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.close()


async def test_auth_method_is_what_the_server_says_it_used(servers: Servers) -> None:
    """Over TCP and over the server's socket (where the embedded server trusts), for the
    lab's user and for a role with a password, the method the probe reads is the one the
    server names in SYSTEM_USER once logged in (NULL: trust), on 16 and later."""
    assert servers.pg is not None
    dsn = servers.pg.dsn
    url = urllib.parse.urlsplit(dsn)
    database = url.path.lstrip("/") or "postgres"
    admin = await asyncpg.connect(dsn)
    role = f"locklab_scram_test_m{os.getpid()}"
    try:
        if admin.get_server_version().major < 16:
            pytest.skip("SYSTEM_USER needs PostgreSQL 16")
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{scram_verifier('pw-1', 4096)}'")
        socket_dir = str(await admin.fetchval("SHOW unix_socket_directories")).split(",")[0]
        port = await admin.fetchval("SHOW port")
        # (the probe's DSN, connect kwargs of the same login)
        ways: list[tuple[str, dict[str, Any]]] = [(dsn, {})]
        if socket_dir.strip().startswith("/"):
            at = {"host": socket_dir.strip(), "port": port}
            ways.append((f"{dsn.split('@')[0]}@/{database}?{urllib.parse.urlencode(at)}", at))
        logins: list[tuple[str, dict[str, Any]]] = [
            ("", {}),
            (role, {"user": role, "password": "pw-1"}),
        ]
        seen = []
        for probe, where in ways:
            for user, login in logins:
                conn = await asyncpg.connect(dsn, **where, **login)
                used = await conn.fetchval("SELECT system_user")
                await conn.close()
                seen.append(await auth_method(probe, database, user))
                assert seen[-1] == (used or "trust:").split(":")[0], (probe, user)
        assert "scram-sha-256" in seen
    finally:
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.close()


async def test_a_throwaway_role_logs_in_with_its_grants_and_is_dropped(servers: Servers) -> None:
    """The role has the iterations asked for, its password lets it in, its grants are
    run for it, and none of it is left once the block is done."""
    assert servers.pg is not None
    pool = await asyncpg.create_pool(servers.pg.dsn, min_size=1, max_size=2)
    assert pool is not None
    try:
        grants = ["GRANT pg_read_all_settings TO {role}"]
        async with throwaway_role(pool, 4096, grants) as (role, password):
            assert role.startswith(f"{ROLE_PREFIX}_")
            stored = await pool.fetchval(
                "SELECT rolpassword FROM pg_authid WHERE rolname = $1", role
            )
            assert stored.startswith("SCRAM-SHA-256$4096:")
            conn = await asyncpg.connect(servers.pg.dsn, user=role, password=password)
            assert await conn.fetchval("SELECT pg_has_role('pg_read_all_settings', 'MEMBER')")
            await conn.close()
        assert await pool.fetchval("SELECT count(*) FROM pg_roles WHERE rolname = $1", role) == 0
    finally:
        await pool.close()


async def test_a_role_left_by_a_killed_lab_is_dropped_by_the_next(servers: Servers) -> None:
    """A lab killed with SIGKILL leaves its throwaway role (no finally runs): the next
    throwaway_role drops the roles whose comment names a process of this host that is gone,
    and leaves a live process's role and a role without the comment alone."""
    assert servers.pg is not None
    gone = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await gone.wait()  # its PID names no process now
    pool = await asyncpg.create_pool(servers.pg.dsn, min_size=1, max_size=2)
    assert pool is not None
    pid = os.getpid()
    left = {"dead": f"{ROLE_PREFIX}_t_dead{pid}", "live": f"{ROLE_PREFIX}_t_live{pid}"}
    bare = f"{ROLE_PREFIX}_t_bare{pid}"
    makers = {"dead": gone.pid, "live": pid}
    try:
        for who, role in left.items():
            await pool.execute(f"CREATE ROLE {role} LOGIN")
            owner = f"locklab pid={makers[who]} host={pgauth._host()}"
            await pool.execute(f"COMMENT ON ROLE {role} IS '{owner}'")
        await pool.execute(f"CREATE ROLE {bare} LOGIN")
        async with throwaway_role(pool, 4096) as (role, _):
            names = {r["rolname"] for r in await pool.fetch("SELECT rolname FROM pg_roles")}
            assert left["dead"] not in names
            assert {left["live"], bare, role} <= names
    finally:
        for role in (*left.values(), bare):
            await pool.execute(f"DROP ROLE IF EXISTS {role}")
        await pool.close()
