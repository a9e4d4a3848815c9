"""What a worker start costs, exec'd (a fresh interpreter) against forked (lab/procs/forkserver.py).

N starts per kind, one after another: the wall time from ``Worker.spawn`` to the worker's
first event that means it can work (a pod or holder connected and waiting for its first
step, the provider listening), and the child's own CPU until then (/proc/PID/stat, in
clock ticks). Starts its own embedded PostgreSQL and Redis.

    .venv/bin/python scripts/worker_starts.py [N] [pod|lease|service|provider ...]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab import forkserver  # noqa: E402
from lab.procs.workers import Worker  # noqa: E402
from lab.servers import Servers  # noqa: E402
from lab.servers.versions import open_for  # noqa: E402
from scenarios.cron_rerun.cron_rerun import Job  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
KINDS = ("pod", "lease", "service", "provider")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def worker(kind: str, srv: Servers) -> tuple[str, dict[str, Any], str]:
    """(script, config, the event it is ready at) of one kind of worker."""
    assert srv.pg is not None and srv.redis is not None
    dsn, url = srv.pg.dsn, srv.redis.url
    if kind == "pod":
        job = asdict(Job("pod-1", 5, False, False))
        return (
            "scenarios/cron_rerun/pod.py",
            {"dsn": dsn, "login": {}, "job": job, "lazy": False},
            "step",
        )
    if kind == "lease":
        cfg = {"who": "A", "redis_url": url, "dsn": dsn, "key": "starts:k", "fence_key": "starts:f",
               "ttl_ms": 1000, "token": "t", "release": "get-then-del", "fenced": False,
               "pause_at": None}  # fmt: skip
        return "scenarios/lease_gc_pause/worker.py", cfg, "step"
    if kind == "service":
        cfg = {"redis_url": url, "token": "t", "keys": ["starts:a", "starts:b"]}
        return "scenarios/service_lock_order/worker.py", cfg, "step"
    return "lab/kit/provider.py", {}, "listening"


async def one(kind: str, srv: Servers, fork: bool) -> tuple[float, float]:
    script, cfg, ready = worker(kind, srv)
    t0 = asyncio.get_running_loop().time()
    w = await Worker.spawn(ROOT / script, cfg, name=kind, fork=fork, ready_s=None)
    try:
        await w.wait_for(ready, 60)
        return asyncio.get_running_loop().time() - t0, cpu_s(w.pid)
    finally:
        await w.close()


async def main(n: int, kinds: list[str]) -> None:
    with open_for(None, None) as srv:
        for fork in (False, True):
            os.environ[forkserver.ENV] = "1" if fork else "0"
            how = "forked" if fork else "exec'd"
            for kind in kinds:
                rows = [await one(kind, srv, fork) for _ in range(n)]
                walls, cpus = [r[0] * 1000 for r in rows], [r[1] for r in rows]
                print(f"{how:6} {kind:8} n={n}  wall median "
                      f"{statistics.median(walls):6.1f} ms (first {walls[0]:6.1f}, max "
                      f"{max(walls):6.1f})  child CPU median {statistics.median(cpus) * 1000:4.0f} "
                      f"ms, sum {sum(cpus):.2f} s", flush=True)  # fmt: skip
        for s in forkserver._servers.values():
            print(
                f"fork server pid {s.pid}: {cpu_s(s.pid):.2f} CPU-s of its own (its imports, once)"
            )
    print(f"fallbacks to a fresh interpreter: {forkserver.fallbacks}")


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    asked = sys.argv[2:] or list(KINDS)
    if any(k not in KINDS for k in asked):
        sys.stderr.write(f"worker_starts: kinds are {', '.join(KINDS)}\n")
        sys.exit(2)
    asyncio.run(main(count, asked))
