"""The lab's Redis clients: redis-py's pooled client, sized so it waits for a connection
instead of raising, and the auto-pipelining client of one connection (lab/kit/autopipe.py) that
node-redis's behaviour asks for. Used by the runner and by shard workers alike."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lab.aio import within
from lab.errors import LabError

if TYPE_CHECKING:
    from lab.servers import Servers

REDIS_OBSERVERS = 16  # Redis connections beyond the actors': setup, observers, probes
PIPELINED_CONNECTIONS = 1  # per process, as node-redis


def _pooled(url: str, size: int) -> Any:
    """A client whose pool waits for a free connection instead of raising past 100."""
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.driver_info import DriverInfo

    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=size,
        timeout=60,
        retry=Retry(NoBackoff(), 0),
        # one for every connection: redis-py 8 otherwise reads its package metadata per
        # connection to name itself (lab.load.redisstats.preconnect measured it)
        driver_info=DriverInfo(),
    )
    # from_pool: the client owns its pool, so aclose() disconnects it (with
    # Redis(connection_pool=pool) it stays connected, a socket per actor, until collected)
    return aioredis.Redis.from_pool(pool)


async def open_redis(url: str, mode: str, actors: int) -> tuple[Any, Any]:
    """(the pooled client, the actors' auto-pipelining client or None) for `actors`:
    pooled, one connection per actor plus observers; pipelined, one connection for the
    actors (what node-redis uses) and a small pool for setup and observers."""
    from lab.kit.autopipe import AutoPipeline

    if mode != "pipelined":
        return _pooled(url, actors + REDIS_OBSERVERS), None
    client = _pooled(url, REDIS_OBSERVERS)
    try:
        return client, await AutoPipeline.connect(url, PIPELINED_CONNECTIONS)
    except BaseException:
        await client.aclose()
        raise


async def redis_client(servers: Servers, size: int, url: str = "") -> Any:
    """A client whose pool waits for a free connection instead of raising past 100; on
    `url` when given (the actors' Redis through the --rtt proxy), else the server's."""
    assert servers.redis is not None
    client = _pooled(url or servers.redis.url, size)
    try:
        info = await within(client.info("server"), 10)
    except Exception as exc:
        await client.aclose()
        via = " through the --rtt delay proxy" if url and url != servers.redis.url else ""
        raise LabError(f"cannot reach Redis at {servers.redis.info.address}{via}: {exc}") from None
    # Valkey also reports redis_version (7.2.4, for compatibility); its own is valkey_version.
    version = info.get("valkey_version") or info.get("redis_version", servers.redis.info.version)
    servers.redis.info.version = str(version)
    return client
