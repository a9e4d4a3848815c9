"""Independent Redis masters a run owns, for algorithms that need several (Redlock).

Built on the embedded servers' public classes: each node is a real `redis-server` process
on loopback with its own port and password, started here and stopped by PID in `close`.
No replication between them: Redlock's five nodes are independent by design.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError
from lab.procs import alive as pid_alive
from lab.servers.embedded import EmbeddedRedis, make_base_dir


@dataclass
class RedisNodes:
    """`k` disposable Redis masters in one private folder."""

    base: Path
    nodes: list[EmbeddedRedis]

    @classmethod
    def prepare(cls, k: int) -> RedisNodes:
        """The servers found and configured, none started: register `close` first."""
        if k < 1:
            raise LabError(f"redis nodes: {k}: at least one")
        base = make_base_dir()
        try:
            nodes = [EmbeddedRedis.create(base, f"node{i + 1}") for i in range(k)]
        except BaseException:
            shutil.rmtree(base, ignore_errors=True)
            raise
        return cls(base, nodes)

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def urls(self) -> list[str]:
        """Holds the passwords: for clients and worker processes, never for records."""
        return [node.url() for node in self.nodes]

    def pids(self) -> list[int]:
        return [node.pid for node in self.nodes]

    def alive(self) -> list[int]:
        """PIDs of the nodes still running (by /proc, not by process names)."""
        return [pid for pid in self.pids() if pid_alive(pid)]

    def info(self) -> list[dict[str, str]]:
        """What a record may say about the nodes: version and address, no password."""
        return [{"version": n.version, "address": f"127.0.0.1:{n.port}"} for n in self.nodes]

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.base, ignore_errors=True)
