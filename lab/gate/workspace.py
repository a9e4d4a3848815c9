"""Where explored orders run: a fresh database per order (and an emptied Redis), and how
an order is judged.

The setup SQL is applied once to a template database; every order gets
``CREATE DATABASE ... TEMPLATE`` of it. When the actors have a Redis, it is emptied
(``FLUSHDB``) and filled by the Redis setup's commands before every order. The
invariant is SQL that returns one boolean row, read on the order's database; an
invariant command (``--invariant-cmd``) runs after it with the actors' environment,
through pass-through gates, so it reads both stores in any language: exit 0 is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import asyncpg
import redis.asyncio as aioredis

from lab.aio import within
from lab.errors import LabError
from lab.gate.dsn import actor_env, redis_env, upstream_of
from lab.gate.keys import RedisSide
from lab.gate.login import actor_login
from lab.gate.proxy import Gate
from lab.gate.redisgate import RedisGate
from lab.gate.serve import password_file
from lab.load.databases import set_deadlock_timeout
from lab.spec.wire import parse_dsn

CHECK_S = 30.0  # an invariant command that takes longer than this is stuck


@dataclass(frozen=True)
class RedisPlan:
    """The Redis the actors share: its URL (with the password the gate logs in with),
    the commands that fill it before every order, and the actors whose leases may run
    out (None: every actor's; lab/gate/keys.py)."""

    url: str
    setup: Sequence[list[str]] = ()
    pauses: frozenset[int] | None = None


@dataclass
class Workspace:
    """The server, a template database with the setup, and a password file for actors."""

    admin: asyncpg.Connection
    dsn: str
    template: str
    passfile: Path
    invariant: str
    deadlock_timeout_ms: int
    user: str  # whom actors log in as (lab/gate/login.py)
    redis: RedisSide | None = None
    redis_setup: Sequence[list[str]] = ()
    invariant_cmd: str = ""

    @contextlib.asynccontextmanager
    async def database(self) -> AsyncIterator[tuple[str, asyncpg.Connection]]:
        """A fresh copy of the template for one order, and an observer on it; the Redis
        emptied and filled again."""
        name = f"locklab_actor_{uuid.uuid4().hex[:10]}"
        await self.admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        try:
            await set_deadlock_timeout(self.admin, name, self.deadlock_timeout_ms)
            if self.redis is not None:
                await self.redis.reset(self.redis_setup)
            observer = await asyncpg.connect(self.dsn, database=name)
            try:
                yield name, observer
            finally:
                await observer.close()
        finally:
            await self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    async def check(
        self, observer: asyncpg.Connection, database: str, cwd: Path | None
    ) -> tuple[bool, str]:
        """The invariant on an order's database (and the invariant command's exit, when
        there is one): (kept, what it read)."""
        try:
            row = await observer.fetchrow(self.invariant)
        except asyncpg.PostgresError as exc:
            raise LabError(f"the invariant failed: {exc.sqlstate}: {exc}") from None
        if row is None or len(row) != 1:
            raise LabError("the invariant must return one row of one boolean column")
        kept, read = row[0] is True, f"{row[0]}"
        if self.invariant_cmd:
            status, said = await self._run_check(database, cwd)
            kept = kept and status == 0
            read = f"{read}; {self.invariant_cmd!r} exited {status}" + (f": {said}" if said else "")
        return kept, read

    async def _run_check(self, database: str, cwd: Path | None) -> tuple[int, str]:
        """Run the invariant command through pass-through gates: (exit status, the last
        line it wrote)."""
        try:
            argv = shlex.split(self.invariant_cmd)
        except ValueError as exc:
            raise LabError(f"--invariant-cmd: {exc}") from None
        async with Gate(upstream_of(self.dsn)) as gate:
            env = actor_env(gate.port, self.user, database, self.passfile, os.environ)
            rgate = None
            if self.redis is not None:
                rgate = RedisGate(self.redis.host, self.redis.port, self.redis.password, None)
                env.update(redis_env(await rgate.start()))
            try:
                return await _run(argv, env, cwd)
            finally:
                if rgate is not None:
                    await rgate.close()


async def _run(argv: list[str], env: dict[str, str], cwd: Path | None) -> tuple[int, str]:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:
        raise LabError(f"--invariant-cmd: cannot run {argv[0]!r}: {exc.strerror}") from None
    try:
        said, _ = await within(proc.communicate(), CHECK_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise LabError(f"--invariant-cmd did not end in {CHECK_S:.0f} s") from None
    lines = said.decode(errors="replace").strip().splitlines()
    return int(proc.returncode or 0), lines[-1][:200] if lines else ""


@contextlib.asynccontextmanager
async def workspace(
    dsn: str,
    setup: str,
    invariant: str,
    deadlock_timeout_ms: int,
    redis: RedisPlan | None = None,
    invariant_cmd: str = "",
) -> AsyncIterator[Workspace]:
    admin = await asyncpg.connect(dsn)
    template = f"locklab_actors_{uuid.uuid4().hex[:10]}"
    try:
        await admin.execute(f'CREATE DATABASE "{template}"')
        try:
            await _apply(dsn, template, setup)
            async with actor_login(dsn) as login, _redis_side(redis) as side:
                with password_file(login, None) as passfile:
                    yield Workspace(
                        admin,
                        dsn,
                        template,
                        passfile,
                        invariant,
                        deadlock_timeout_ms,
                        user=parse_dsn(login).get("user", "postgres"),
                        redis=side,
                        redis_setup=redis.setup if redis is not None else (),
                        invariant_cmd=invariant_cmd,
                    )
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
    finally:
        await admin.close()


async def _apply(dsn: str, database: str, setup: str) -> None:
    """The setup SQL on the template."""
    conn = await asyncpg.connect(dsn, database=database)
    try:
        if setup.strip():
            await conn.execute(setup)
    except asyncpg.PostgresError as exc:
        raise LabError(f"the setup failed: {exc.sqlstate}: {exc}") from None
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def _redis_side(plan: RedisPlan | None) -> AsyncIterator[RedisSide | None]:
    """The director's client of the actors' Redis, when they have one."""
    if plan is None:
        yield None
        return
    where = urlsplit(plan.url)
    client = aioredis.Redis.from_url(plan.url)
    try:
        password = unquote(where.password or "")
        yield RedisSide(
            client, where.hostname or "127.0.0.1", where.port or 6379, password, plan.pauses
        )
    finally:
        await client.aclose()
