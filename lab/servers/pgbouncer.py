"""PgBouncer, started by the lab in one pool mode in front of its embedded PostgreSQL (SCRAM,
the server's password); found as LOCKLAB_PGBOUNCER or on PATH."""

from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError
from lab.procs.lifecycle import folder_of as folder_of
from lab.procs.lifecycle import make_base_dir as make_base_dir
from lab.procs.lifecycle import remove_base_dir as remove_base_dir
from lab.procs.lifecycle import stop_pid
from lab.procs.trust import UNPRIVILEGED as UNPRIVILEGED
from lab.servers.base import free_port
from lab.servers.embedded import (
    NO_TLS,
    START_ATTEMPTS,
    accepts,
    given_binary,
    run_quiet,
    spawn_until_ready,
)

NOT_INSTALLED = "pgbouncer not installed: apt-get install pgbouncer"


def find_pgbouncer() -> Path:
    """pgbouncer: LOCKLAB_PGBOUNCER, else PATH (Debian's package puts it in /usr/sbin)."""
    if env := os.environ.get("LOCKLAB_PGBOUNCER"):
        return given_binary("LOCKLAB_PGBOUNCER", env)
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if not found:
        raise LabError(f"{NOT_INSTALLED} (or set LOCKLAB_PGBOUNCER to its path)")
    return Path(found)


def pgbouncer_missing(pg_external: bool) -> str | None:
    """Why no PgBouncer can be had for a run, or None when one can: the user's
    (LOCKLAB_PGBOUNCER_DSN), or the lab's own binary in front of its own PostgreSQL. A
    LOCKLAB_PGBOUNCER that names no program is the user's mistake, not a missing part."""
    if os.environ.get("LOCKLAB_PGBOUNCER_DSN"):
        return None
    if pg_external:
        return "PgBouncer not given: set LOCKLAB_PGBOUNCER_DSN (PostgreSQL is not the lab's own)"
    if os.environ.get("LOCKLAB_PGBOUNCER"):
        return None
    try:
        find_pgbouncer()
    except LabError:
        return NOT_INSTALLED
    return None


@dataclass
class EmbeddedPgBouncer:
    """PgBouncer in one pool mode, in front of an embedded PostgreSQL (SCRAM, its password).

    As root it runs as the server user from the start (setpriv, like the other servers),
    not as root dropping to its ini's `user`; its files live in the lab's base folder,
    which that user owns.
    """

    base: Path
    binary: Path
    mode: str  # "transaction" | "session"
    pg_port: int
    password: str  # PostgreSQL's, which clients of PgBouncer must give too
    pool_size: int = 4
    version: str = ""
    port: int = 0
    pid: int = 0

    @classmethod
    def create(
        cls, base: Path, mode: str, pg_port: int, password: str, pool_size: int = 4
    ) -> EmbeddedPgBouncer:
        binary = find_pgbouncer()
        out = run_quiet([str(binary), "--version"], timeout=10)
        version = out.stdout.split()[1] if out.stdout.startswith("PgBouncer") else "unknown"
        return cls(base, binary, mode, pg_port, password, pool_size, version)

    def _ini(self) -> Path:
        name = f"pgbouncer-{self.mode}"
        userlist = self.base / "pgbouncer-users.txt"
        userlist.write_text(f'"postgres" "{self.password}"\n')
        userlist.chmod(0o644)  # inside the private base folder; read by the server user
        ini = self.base / f"{name}.ini"
        lines = [
            "[databases]",
            f"* = host=127.0.0.1 port={self.pg_port}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = scram-sha-256",
            f"auth_file = {userlist}",
            f"pool_mode = {self.mode}",
            f"default_pool_size = {self.pool_size}",
            "max_client_conn = 2000",
            "server_round_robin = 0",  # LIFO: a freed server connection is reused first
            "ignore_startup_parameters = extra_float_digits,options,statement_timeout",
            f"logfile = {self.base / (name + '.log')}",
            f"pidfile = {self.base / (name + '.pid')}",
        ]
        ini.write_text("\n".join(lines) + "\n")
        return ini

    def start(self) -> None:
        for _ in range(START_ATTEMPTS):
            self.port = free_port()
            log = self.base / f"pgbouncer-{self.mode}.log"
            args = [str(self.binary), "-q", str(self._ini())]
            ready = functools.partial(accepts, self.port)
            self.pid = spawn_until_ready(args, ready, log, "PgBouncer", self.base)
            if self.pid:
                return
        raise LabError(f"PgBouncer did not start after {START_ATTEMPTS} port collisions")

    def stop(self) -> None:
        stop_pid(self.pid)  # SIGTERM: immediate shutdown

    def dsn(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/postgres{NO_TLS}"
