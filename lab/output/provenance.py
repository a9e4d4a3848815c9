"""`locklab --version`: what a run would record about the lab, its servers and libraries."""

from __future__ import annotations

from lab.core.provenance import lab_info
from lab.servers.versions import would_use


def version_lines() -> list[str]:
    """The lab and its commit, the Python, the servers a run would use and where they come
    from, and the client libraries' versions (every record's `lab` carries the same)."""
    lab = lab_info()
    libraries = ", ".join(f"{name} {v}" for name, v in lab["libraries"].items())
    return [
        f"locklab {lab['version']} (commit {lab['git_commit'] or 'unknown: not a git checkout'})",
        f"python {lab['python']}",
        *would_use(),
        f"libraries: {libraries}",
    ]
