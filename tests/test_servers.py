"""Server resolution: external first, Docker only when an engine answers, embedded otherwise."""

from __future__ import annotations

import os
import tempfile
import urllib.parse
from pathlib import Path

import asyncpg
import pytest

from lab.errors import LabError
from lab.procs import alive as pid_alive
from lab.servers import Servers, docker, open_servers
from lab.servers.base import check_url, redact, without_password
from lab.servers.embedded import make_base_dir, remove_base_dir
from lab.servers.redissentinel import SentinelGroup


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the Docker client at a socket that does not exist."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")


def test_docker_absent_is_detected_by_trying(no_docker: None) -> None:
    """A docker CLI may exist without an engine: detection pings the engine."""
    reason = docker.docker_unavailable()
    assert reason is not None and "no Docker engine" in reason


def test_forced_docker_without_engine_is_one_clear_error(no_docker: None) -> None:
    """LOCKLAB_SERVERS=docker without an engine fails with a sentence, not a traceback."""
    with pytest.raises(LabError, match="LOCKLAB_SERVERS=docker but no Docker engine"):
        open_servers(need_redis=False, mode="docker")


async def test_auto_starts_embedded_without_asking_docker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """auto: embedded servers start, answer and stop on close; a Docker engine, there or
    not, is never asked (Docker only when asked for: LOCKLAB_SERVERS=docker)."""

    def asked() -> str | None:
        raise AssertionError("auto asked Docker")

    monkeypatch.setattr(docker, "docker_unavailable", asked)
    for var in ("LOCKLAB_PG_DSN", "LOCKLAB_REDIS_URL", "LOCKLAB_SERVERS"):
        monkeypatch.delenv(var, raising=False)
    srv = open_servers(mode="auto")
    with srv:
        assert srv.pg is not None and srv.redis is not None
        assert srv.pg.info.kind == "embedded" and srv.redis.info.kind == "embedded"
        assert not any("docker" in n for n in srv.notes)
        conn = await asyncpg.connect(srv.pg.dsn)
        assert await conn.fetchval("SHOW deadlock_timeout") == "1s"
        assert await conn.fetchval("SHOW log_lock_waits") == "off"
        await conn.close()
        log_dir = srv.pg.log_path.parent if srv.pg.log_path else None
        pid = int((log_dir / "pgdata" / "postmaster.pid").read_text().split()[0]) if log_dir else 0
    assert not pid_alive(pid)
    assert log_dir is not None and not log_dir.exists()


def test_postgres_never_runs_as_root(servers: Servers) -> None:
    """When the lab is root, the embedded postmaster runs as an unprivileged user."""
    if servers.pg is None or servers.pg.info.kind != "embedded" or servers.pg.log_path is None:
        pytest.skip("not an embedded server")
    if os.geteuid() != 0:
        pytest.skip("the lab is not root: nothing to drop")
    pid = (servers.pg.log_path.parent / "pgdata" / "postmaster.pid").read_text().split()[0]
    uid = next(
        line.split()[1]
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("Uid:")
    )  # the real uid, read from the kernel
    assert uid != "0"


def test_external_dsn_wins_and_is_redacted(servers: Servers) -> None:
    """A DSN given by the user is used as is (no server started) and recorded without secrets."""
    assert servers.pg is not None
    hostport = urllib.parse.urlsplit(servers.pg.dsn).netloc.rpartition("@")[2]  # answers
    srv = open_servers(f"postgresql://app:s3cret@{hostport}/x", need_redis=False)
    assert srv.pg is not None and srv.pg.info.kind == "external"
    assert "s3cret" not in srv.pg.info.address and srv.stops == []


@pytest.mark.parametrize(
    "url", ["postgresql://host:notaport/db", "mysql://host/db", "just-words", "postgresql://"]
)
def test_malformed_dsn(url: str) -> None:
    """A malformed DSN is rejected before anything connects."""
    with pytest.raises(LabError, match="malformed"):
        check_url(url, ("postgresql", "postgres"), "PostgreSQL DSN")


def test_redact_drops_user_and_password() -> None:
    """Records keep scheme, host, port and path only."""
    assert redact("postgresql://u:p@db.example:5433/shop") == "postgresql://db.example:5433/shop"


def test_base_dir_avoids_private_parents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As root, a TMPDIR under a 0700 folder is not used: the server user could not enter it."""
    if os.geteuid() != 0:
        pytest.skip("only root hands the folder to another user")
    private = tmp_path / "p"
    private.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    base = make_base_dir()
    try:
        assert not base.is_relative_to(private)
        assert base.stat().st_uid != 0  # handed to the unprivileged server user
    finally:
        remove_base_dir(base)
    assert not base.parent.exists()


def test_no_password_in_messages_or_command_lines() -> None:
    """A malformed DSN's error hides the password; a child gets it through PGPASSWORD."""
    with pytest.raises(LabError) as caught:
        check_url("postgresql://u:S3CRET@h:abc/db", ("postgresql",), "PostgreSQL DSN")
    assert "S3CRET" not in str(caught.value) and "h:abc" in str(caught.value)
    assert without_password("postgresql://u:p%40ss@h:5/db") == ("postgresql://u@h:5/db", "p@ss")
    assert without_password("postgresql://u@h:5/db") == ("postgresql://u@h:5/db", None)


def test_sentinel_group_failing_half_way_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """If a Sentinel cannot start, closing the group still stops the primary, the replica
    and the link proxy it started, and removes its folder."""
    group = SentinelGroup.prepare()

    def refuse() -> None:
        raise LabError("sentinel refused")

    monkeypatch.setattr(group.sentinels[1], "start", refuse)
    group.start_primary()
    group.start_link()
    with pytest.raises(LabError):
        group.start_rest()
    assert group.link is not None
    started = [group.primary.pid, group.replica.pid, group.sentinels[0].pid, group.link.pid]
    assert all(pid_alive(pid) for pid in started)
    group.close()
    assert not any(pid_alive(pid) for pid in started)
    assert not group.base.exists()


async def test_second_cluster_is_the_template_with_a_password_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first embedded PostgreSQL leaves its fresh data folder as a template; the next
    one is a copy of it (no initdb) and accepts only its own password, not the first's."""
    from lab.servers import embedded, pgtemplate

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    initdbs: list[int] = []
    real = embedded.EmbeddedPostgres._run_initdb

    def counted(self: embedded.EmbeddedPostgres, args: list[str]) -> None:
        initdbs.append(1)
        real(self, args)

    monkeypatch.setattr(embedded.EmbeddedPostgres, "_run_initdb", counted)
    first = ""
    for _ in range(2):
        with open_servers(need_redis=False, mode="embedded") as srv:
            assert srv.pg is not None
            conn = await asyncpg.connect(srv.pg.dsn)
            assert await conn.fetchval("SHOW fsync") == "off"
            await conn.close()
            if first:  # the first cluster's password does not open the second
                with pytest.raises(asyncpg.InvalidPasswordError):
                    await asyncpg.connect(
                        first.replace(first.rsplit(":", 1)[1], srv.pg.dsn.rsplit(":", 1)[1])
                    )
            first = first or srv.pg.dsn
        assert len(initdbs) == 1  # the second cluster came from the template
    root = pgtemplate.cache_root()
    assert [p.name for p in root.iterdir()] and (root.stat().st_mode & 0o077) == 0


def test_a_cache_others_may_write_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A template folder with group/other access is not trusted: initdb runs instead."""
    from lab.procs import trust
    from lab.servers import pgtemplate

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = pgtemplate.cache_root() / "k"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "PG_VERSION").write_text("17\n")
    trust.write_private_json(folder / pgtemplate.MARKER, {"key": "k"})
    for p in (pgtemplate.cache_root(), folder):
        p.chmod(0o700)
    assert pgtemplate.find("k") == folder / "data"
    folder.chmod(0o777)
    assert pgtemplate.find("k") is None
    folder.chmod(0o700)
    pgtemplate.cache_root().chmod(0o755)
    assert pgtemplate.find("k") is None
