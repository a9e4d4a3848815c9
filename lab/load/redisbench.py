"""`redis-benchmark -t get` against the run's Redis: what this Redis serves, counted by Redis.

The reference for client-bound claims (DL-20) and for `locklab bench redis`. GET/s is
Redis's own count (INFO commandstats, sampled every 50 ms by lab.load.redisstats) over the time redis-benchmark
was sending, as the lab's wait window has its connections open before it starts; the
count over its whole wall time (connecting 5,000 clients included) and redis-benchmark's
own figure are kept beside it. CPU seconds of redis-benchmark (rusage of the reaped
child) and of redis-server (INFO cpu) are over its whole run.

redis-benchmark has no way to take the password other than `-a`: for its second or two
the password of the lab's Redis (random, made per server) is on its command line.
"""

from __future__ import annotations

import asyncio
import csv
import io
import resource
import shutil
import time
import urllib.parse
from typing import Any

from lab.errors import LabError
from lab.load.redisstats import Sampler

REQUESTS_PER_CLIENT = 20  # -n: enough that connecting the clients is not all it measures
MIN_REQUESTS = 20_000
SAMPLE_S = 0.05  # INFO commandstats this often while it runs: the rate while it sends


def find_redis_benchmark() -> str | None:
    return shutil.which("redis-benchmark")


def _sending(samples: list[tuple[float, int]]) -> tuple[float, int]:
    """(seconds, GETs) from the sample before the count first rose to the last rise: the
    time redis-benchmark was sending, without its connection setup and exit."""
    rises = [i for i in range(1, len(samples)) if samples[i][1] > samples[i - 1][1]]
    if not rises:
        return 0.0, 0
    first, last = samples[rises[0] - 1], samples[rises[-1]]
    return last[0] - first[0], last[1] - first[1]


async def redis_benchmark(url: str, clients: int, requests: int | None = None) -> dict[str, Any]:
    """Run `redis-benchmark -t get -c clients -n requests` against the Redis at `url`,
    sampled meanwhile (lab.load.redisstats.Sampler). Raises LabError when it cannot run."""
    requests = requests or max(MIN_REQUESTS, REQUESTS_PER_CLIENT * clients)
    binary = find_redis_benchmark()
    if binary is None:
        raise LabError("redis-benchmark not found (Debian: apt-get install redis-tools)")
    parts = urllib.parse.urlsplit(url)
    cmd = [binary, "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 6379)]
    if parts.password:
        cmd += ["-a", urllib.parse.unquote(parts.password)]
        if parts.username:
            cmd += ["--user", urllib.parse.unquote(parts.username)]
    db = (parts.path or "/0").lstrip("/") or "0"
    cmd += ["--dbnum", db, "-t", "get", "-c", str(clients), "-n", str(requests), "--csv"]
    sampler = Sampler(url, every_s=SAMPLE_S)
    await sampler.start()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            out, err = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    finally:
        samples = await sampler.stop()
    seconds = time.perf_counter() - started
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, after = samples[0], samples[-1]
    rows = [r for r in csv.reader(io.StringIO(out.decode())) if r and r[0] == "GET"]
    if proc.returncode != 0 or not rows:
        last = (err.decode().strip() or out.decode().strip()).splitlines()[-1:]
        raise LabError(f"redis-benchmark failed: {' '.join(last)}")
    cpu = (after_children.ru_utime - children.ru_utime) + (
        after_children.ru_stime - children.ru_stime
    )
    gets = after.calls.get("get", 0) - before.calls.get("get", 0)
    sending_s, sent = _sending([(x.t, x.calls.get("get", 0)) for x in samples])
    return {
        "command": f"redis-benchmark -t get -c {clients} -n {requests}",
        "clients": clients,
        "requests": requests,
        "seconds": round(seconds, 3),
        "own_get_per_s": round(float(rows[0][1])),
        "redis_gets": gets,
        "get_per_s": round(sent / sending_s) if sending_s > 0 else round(gets / seconds),
        "sending_s": round(sending_s, 3),
        "get_per_s_wall": round(gets / seconds),
        "client_cpu_per_s": round(cpu / seconds, 3),
        "redis_cpu_per_s": round((after.redis_cpu_s - before.redis_cpu_s) / seconds, 3),
    }
