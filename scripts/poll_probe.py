"""The poll loop alone, without the scenario: how many GET/s one process makes.

N pollers each do GET, SET NX, sleep 50 ms, forever; after a 1 s warm-up, Redis's own
GET count over 3 s. Compares redis-py's pooled client, redis-py's pipeline per loop
tick, and lab/kit/autopipe.py, on asyncio and uvloop. Starts its own embedded Redis.

    .venv/bin/python scripts/poll_probe.py [N]        (default 5000)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

POLL_S = 0.05
WARMUP_S = 1.0
MEASURE_S = 3.0


class TickPipeline:
    """The first attempt: one redis-py pipeline(transaction=False) per loop tick."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.queue: list[tuple[str, tuple[Any, ...], dict[str, Any], asyncio.Future[Any]]] = []
        self.scheduled = False

    def call(self, method: str, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.queue.append((method, args, kwargs, fut))
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self.flush)
        return fut

    def flush(self) -> None:
        self.scheduled = False
        batch, self.queue = self.queue, []
        asyncio.get_running_loop().create_task(self.send(batch))

    async def send(self, batch: list[Any]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for method, args, kwargs, _ in batch:
            getattr(pipe, method)(*args, **kwargs)
        for (_, _, _, fut), reply in zip(batch, await pipe.execute(), strict=True):
            if not fut.done():
                fut.set_result(reply)

    def get(self, key: str) -> asyncio.Future[Any]:
        return self.call("get", key)

    def set(self, key: str, value: str, **kw: Any) -> asyncio.Future[Any]:
        return self.call("set", key, value, **kw)


async def probe(url: str, n: int, mode: str) -> str:
    import redis.asyncio as aioredis

    from lab.kit.autopipe import AutoPipeline

    size = n + 4 if mode == "pooled" else 4
    client = aioredis.Redis(
        connection_pool=aioredis.BlockingConnectionPool.from_url(url, max_connections=size)
    )
    r: Any = client
    if mode == "tick-pipeline":
        r = TickPipeline(client)
    elif mode == "autopipe":
        r = await AutoPipeline.connect(url)
    stop = False

    async def poller() -> None:
        while not stop:
            await r.get("probe:key")
            await r.set("probe:lock", "1", nx=True, px=10_000)
            await asyncio.sleep(POLL_S)

    tasks = [asyncio.create_task(poller()) for _ in range(n)]
    await asyncio.sleep(WARMUP_S)
    before, cpu0, t0 = (
        await client.info("cpu", "commandstats"),
        time.process_time(),
        time.monotonic(),
    )
    await asyncio.sleep(MEASURE_S)
    after, cpu1, t1 = (
        await client.info("cpu", "commandstats"),
        time.process_time(),
        time.monotonic(),
    )
    stop = True
    await asyncio.gather(*tasks, return_exceptions=True)
    if mode == "autopipe":
        await r.aclose()
    await client.aclose()
    gets = after["cmdstat_get"]["calls"] - before["cmdstat_get"]["calls"]
    rcpu = sum(after[k] - before[k] for k in ("used_cpu_user", "used_cpu_sys"))
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    return (
        f"{mode:<14} {loop:<8} n={n}: {gets / (t1 - t0):>8,.0f} GET/s (demand {n * 20:,}); "
        f"client CPU {(cpu1 - cpu0) / (t1 - t0):.2f} s/s, Redis CPU {rcpu / (t1 - t0):.2f} s/s"
    )


def main() -> None:
    if len(sys.argv) > 2:  # a child: one measurement, its own loop
        url, n, mode, loop = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
        if loop == "uvloop":
            import uvloop

            print(uvloop.run(probe(url, n, mode)), flush=True)
        else:
            print(asyncio.run(probe(url, n, mode)), flush=True)
        return
    from lab.servers import open_servers

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    with open_servers(need_pg=False, need_redis=True) as srv:
        assert srv.redis is not None
        for mode in ("pooled", "tick-pipeline", "autopipe"):
            for loop in ("asyncio", "uvloop"):
                cmd = [sys.executable, __file__, srv.redis.url, str(n), mode, loop]
                subprocess.run(cmd, check=True, timeout=120)


if __name__ == "__main__":
    main()
