"""Where PostgreSQL and Redis come from: external → kept embedded → Docker → embedded.

1. external: a DSN/URL given by flag or ``LOCKLAB_PG_DSN`` / ``LOCKLAB_REDIS_URL``;
2. embedded servers kept running by ``locklab servers up``;
3. Docker, when an engine answers (testcontainers, images pinned to the documents');
4. embedded: the lab starts its own from binaries it finds, and stops them afterwards.

``LOCKLAB_SERVERS=embedded|docker|external`` forces one source.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.errors import LabError
from lab.results import write_json
from lab.servers import docker
from lab.servers.base import PgServer, RedisServer, ServerInfo, check_url, redact
from lab.servers.embedded import (
    PG_SETTINGS,
    EmbeddedPgBouncer,
    EmbeddedPostgres,
    EmbeddedRedis,
    make_base_dir,
    pid_alive,
    stop_pid,
)

__all__ = ["PgServer", "RedisServer", "ServerInfo", "Servers", "open_servers"]

MODES = ("auto", "external", "embedded", "docker")


@dataclass
class Servers:
    """The servers of one lab command, and how to stop the ones it started."""

    pg: PgServer | None = None
    redis: RedisServer | None = None
    notes: list[str] = field(default_factory=list)
    stops: list[Callable[[], None]] = field(default_factory=list)
    pgbouncer: dict[str, str] = field(default_factory=dict)  # pool mode -> DSN (secrets)
    pgbouncer_info: ServerInfo | None = None

    def infos(self) -> list[ServerInfo]:
        found = [s.info for s in (self.pg, self.redis) if s is not None]
        return found + ([self.pgbouncer_info] if self.pgbouncer_info else [])

    def close(self) -> None:
        """Stop, in reverse order, everything this command started; never raises."""
        while self.stops:
            stop = self.stops.pop()
            with contextlib.suppress(Exception):
                stop()

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def state_path() -> Path:
    """Where `locklab servers up` records what it keeps running (per user)."""
    return Path(tempfile.gettempdir()) / f"locklab-servers-{os.getuid()}.json"


def open_servers(
    pg_dsn: str | None = None,
    redis_url: str | None = None,
    *,
    need_pg: bool = True,
    need_redis: bool = True,
    need_pgbouncer: bool = False,
    mode: str | None = None,
) -> Servers:
    """Resolve every server a command needs; the caller closes the result."""
    mode = mode or os.environ.get("LOCKLAB_SERVERS", "auto")
    if mode not in MODES:
        raise LabError(f"LOCKLAB_SERVERS={mode!r} is not one of {', '.join(MODES)}")
    pg_dsn = pg_dsn or os.environ.get("LOCKLAB_PG_DSN") or None
    redis_url = redis_url or os.environ.get("LOCKLAB_REDIS_URL") or None
    servers = Servers()
    try:
        if need_pg and pg_dsn:
            check_url(pg_dsn, ("postgresql", "postgres"), "PostgreSQL DSN")
            info = ServerInfo("postgresql", "external", "?", redact(pg_dsn))
            servers.pg = PgServer(info=info, dsn=pg_dsn)
        if need_redis and redis_url:
            check_url(redis_url, ("redis", "rediss", "unix"), "Redis URL")
            servers.redis = RedisServer(
                ServerInfo("redis", "external", "?", redact(redis_url)), redis_url
            )
        want_pg = need_pg and servers.pg is None
        want_redis = need_redis and servers.redis is None
        if mode == "external" and (want_pg or want_redis):
            raise LabError("LOCKLAB_SERVERS=external needs --pg-dsn and --redis-url")
        if (want_pg or want_redis) and mode == "auto":
            kept = kept_servers()
            if kept is not None:
                if want_pg:
                    servers.pg, want_pg = kept.pg, False
                if want_redis:
                    servers.redis, want_redis = kept.redis, False
        if (want_pg or want_redis) and mode in ("auto", "docker"):
            reason = docker.docker_unavailable()
            if reason is None:
                if want_pg:
                    servers.pg, stop = docker.start_postgres()
                    servers.stops.append(stop)
                    want_pg = False
                if want_redis:
                    servers.redis, stop = docker.start_redis()
                    servers.stops.append(stop)
                    want_redis = False
            elif mode == "docker":
                raise LabError(f"LOCKLAB_SERVERS=docker but {reason}")
            else:
                servers.notes.append(f"docker: {reason}; using embedded servers")
        if want_pg or want_redis:
            _start_embedded(servers, want_pg, want_redis)
        if need_pgbouncer:
            _pgbouncers(servers)
    except BaseException:
        servers.close()
        raise
    return servers


def _start_embedded(
    servers: Servers, want_pg: bool, want_redis: bool
) -> tuple[EmbeddedPostgres | None, EmbeddedRedis | None]:
    base = make_base_dir()
    servers.stops.append(lambda: shutil.rmtree(base, ignore_errors=True))
    pg = redis = None
    if want_pg:
        pg = EmbeddedPostgres.create(base)
        servers.stops.append(pg.stop)
        pg.start()
        servers.pg = pg.server()
    if want_redis:
        redis = EmbeddedRedis.create(base)
        servers.stops.append(redis.stop)
        redis.start()
        servers.redis = redis.server()
    return pg, redis


def _pgbouncers(servers: Servers) -> None:
    """PgBouncer in transaction and session mode: the user's, or embedded in front of an
    embedded PostgreSQL (clients give PgBouncer the server's password; it logs in with it)."""
    tx = os.environ.get("LOCKLAB_PGBOUNCER_DSN")
    if tx:
        check_url(tx, ("postgresql", "postgres"), "PgBouncer DSN")
        servers.pgbouncer["transaction"] = tx
        session = os.environ.get("LOCKLAB_PGBOUNCER_SESSION_DSN")
        if session:
            check_url(session, ("postgresql", "postgres"), "PgBouncer DSN")
            servers.pgbouncer["session"] = session
        servers.pgbouncer_info = ServerInfo("pgbouncer", "external", "?", redact(tx))
        return
    pg = servers.pg
    if pg is None or pg.info.kind != "embedded":
        raise LabError(
            "this scenario needs PgBouncer: set LOCKLAB_PGBOUNCER_DSN (transaction mode) "
            "when PostgreSQL is not the lab's embedded one"
        )
    pg_port = int(pg.info.address.rsplit(":", 1)[1])
    base = make_base_dir()
    servers.stops.append(lambda: shutil.rmtree(base, ignore_errors=True))
    ports = {}
    bouncer: EmbeddedPgBouncer | None = None
    for pool_mode in ("transaction", "session"):
        password = urllib.parse.urlsplit(pg.dsn).password or ""
        bouncer = EmbeddedPgBouncer.create(base, pool_mode, pg_port, password)
        servers.stops.append(bouncer.stop)
        bouncer.start()
        servers.pgbouncer[pool_mode] = bouncer.dsn()
        ports[pool_mode] = bouncer.port
    assert bouncer is not None
    servers.pgbouncer_info = ServerInfo(
        "pgbouncer",
        "embedded",
        bouncer.version,
        ", ".join(f"{m} 127.0.0.1:{p}" for m, p in ports.items()),
        str(bouncer.binary),
        {"default_pool_size": str(bouncer.pool_size), "server_round_robin": "0"},
    )


# --- servers kept running between commands -------------------------------------------


def servers_up() -> Servers:
    """Start embedded PostgreSQL and Redis and leave them running (recorded by PID)."""
    if (kept := kept_servers()) is not None:
        return kept
    servers_down()  # a state file whose servers half died: stop the survivor first
    servers = Servers()
    try:
        pg, redis = _start_embedded(servers, True, True)
        assert pg is not None and redis is not None
        state = {
            "base": str(pg.base),
            "pg": {**pg.server().info.to_json(), "dsn": pg.server().dsn, "log": str(pg.log)},
            "redis": {**redis.server().info.to_json(), "url": redis.server().url},
            "pg_pid": pg.pid,
            "redis_pid": redis.pid,
            "pg_bindir": str(pg.bindir),
        }
        write_json(state_path(), state)  # until it is written, they are this command's
    except BaseException:
        servers.close()
        raise
    servers.stops.clear()  # kept: `servers down` stops them
    return kept_servers() or servers


def servers_down() -> list[str]:
    """Stop what `servers up` started, by the PIDs it recorded; returns what was stopped."""
    path = state_path()
    if not path.exists():
        return []
    try:
        state = json.loads(path.read_text())
    except (ValueError, OSError) as exc:
        raise LabError(f"{path}: unreadable state file ({exc}); remove it") from None
    stopped = []
    if pid_alive(int(state.get("pg_pid", 0))):
        kept = EmbeddedPostgres(Path(state["base"]), Path(state["pg_bindir"]), "", "")
        kept.pid = int(state["pg_pid"])
        kept.stop()
        stopped.append(f"postgresql pid {state['pg_pid']}")
    if pid_alive(int(state.get("redis_pid", 0))):
        stop_pid(int(state["redis_pid"]))
        stopped.append(f"redis pid {state['redis_pid']}")
    if state.get("base"):
        shutil.rmtree(state["base"], ignore_errors=True)
    path.unlink(missing_ok=True)
    return stopped


def kept_servers() -> Servers | None:
    path = state_path()
    if not path.exists():
        return None
    try:
        state: dict[str, Any] = json.loads(path.read_text())
        alive = pid_alive(int(state["pg_pid"])) and pid_alive(int(state["redis_pid"]))
        alive = alive and isinstance(state["pg"], dict) and isinstance(state["redis"], dict)
    except (ValueError, KeyError, TypeError, OSError):
        alive = False
    if not alive:
        return None
    pg_info = {k: v for k, v in state["pg"].items() if k in ServerInfo.__dataclass_fields__}
    redis_info = {k: v for k, v in state["redis"].items() if k in ServerInfo.__dataclass_fields__}
    pg_info["source"] += ", kept by `locklab servers up`"
    redis_info["source"] += ", kept by `locklab servers up`"
    pg = PgServer(
        info=ServerInfo(**pg_info),
        dsn=state["pg"]["dsn"],
        log_path=Path(state["pg"]["log"]),
        bindir=Path(state["pg_bindir"]),
        max_connections=int(PG_SETTINGS["max_connections"]),
    )
    return Servers(pg=pg, redis=RedisServer(ServerInfo(**redis_info), state["redis"]["url"]))
