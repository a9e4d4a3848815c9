"""Servers in Docker containers via testcontainers, pinned to the documents' versions, when
asked for (``--servers docker``). The images are the versions the documents measured on
(PostgreSQL 17.11, Redis 7.4.11), not the embedded builds (17.10 and 8.2.3, what pip
ships): Docker is the way to run the documents' own servers; docs/servers.md says so."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from lab.servers.base import PgServer, RedisServer, ServerInfo
from lab.servers.embedded import PG_SETTINGS

PG_IMAGE = "postgres:17.11"
REDIS_IMAGE = "redis:7.4.11"


def docker_unavailable() -> str | None:
    """None when a Docker engine answers; otherwise why not (the CLI alone is not enough)."""
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        client.close()
    except Exception as exc:  # any failure means: no usable engine here
        return f"no Docker engine answered ({type(exc).__name__})"
    return None


def _start(container: Any) -> None:
    """Start a container; if it never gets ready, do not leave it running."""
    try:
        container.start()
    except BaseException:
        with contextlib.suppress(Exception):
            container.stop()
        raise


def start_postgres() -> tuple[PgServer, Callable[[], None]]:
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:  # testcontainers < 4.15, before its modules moved to .community
        from testcontainers.postgres import PostgresContainer  # type: ignore[no-redef, unused-ignore]

    flags = " ".join(f"-c {k}={v!r}" for k, v in PG_SETTINGS.items())
    container = PostgresContainer(
        PG_IMAGE, username="postgres", password="locklab", dbname="postgres"
    )
    container.with_command(f"postgres {flags}")
    _start(container)
    host, port = container.get_container_host_ip(), container.get_exposed_port(5432)
    raw = container.get_wrapped_container()
    info = ServerInfo("postgresql", "docker", PG_IMAGE.split(":")[1], f"{host}:{port}", PG_IMAGE)
    server = PgServer(
        info=info,
        dsn=f"postgresql://postgres:locklab@{host}:{port}/postgres",
        max_connections=int(PG_SETTINGS["max_connections"]),
        logs=lambda: bytes(raw.logs()),
    )
    return server, container.stop


def start_redis() -> tuple[RedisServer, Callable[[], None]]:
    try:
        from testcontainers.community.redis import RedisContainer
    except ImportError:  # testcontainers < 4.15
        from testcontainers.redis import RedisContainer  # type: ignore[no-redef, unused-ignore]

    container = RedisContainer(REDIS_IMAGE)
    _start(container)
    host, port = container.get_container_host_ip(), container.get_exposed_port(6379)
    info = ServerInfo("redis", "docker", REDIS_IMAGE.split(":")[1], f"{host}:{port}", REDIS_IMAGE)
    return RedisServer(info=info, url=f"redis://{host}:{port}/0"), container.stop
