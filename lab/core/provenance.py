"""What ran: the lab's version and commit, the Python, and the client libraries' versions,
in every record (`lab`) and in `locklab --version`. docs/load.md compares throughput across
commits, and a new asyncpg or redis-py can move those numbers as much as a commit can."""

from __future__ import annotations

import functools
import importlib.metadata
import platform
from typing import Any

from lab import __version__
from lab.core.results import git_commit

# The libraries a scenario's numbers go through (drivers, parser, event loop), then the
# ones that only draw or start things.
LIBRARIES = ("asyncpg", "redis", "hiredis", "uvloop", "typer", "rich", "jinja2", "testcontainers")


@functools.cache
def library_versions() -> dict[str, str]:
    """Each library's installed version ("absent" when it is not installed)."""
    found: dict[str, str] = {}
    for name in LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


@functools.cache
def lab_info() -> dict[str, Any]:
    """The `lab` entry of every record."""
    return {
        "version": __version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "libraries": library_versions(),
    }
