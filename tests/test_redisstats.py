"""Redis's own counts sampled over a run (lab/load/redisstats.py), on the session's real Redis."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis
import redis.asyncio as aioredis

from lab.load.redisstats import Rate, Sample, Sampler, limit, preconnect, rate
from lab.servers import Servers

GETS = 300


@pytest.fixture
def url(servers: Servers) -> str:
    assert servers.redis is not None
    return servers.redis.url


async def test_sampler_counts_what_redis_served_with_its_probes(url: str) -> None:
    """GETs sent while the sampler runs are Redis's count between its first and last
    sample; every sample carries the probe's reply, and samples come in time order."""
    client = aioredis.Redis.from_url(url)
    key = f"locklab:redisstats-test:{uuid.uuid4().hex[:8]}"
    await client.set(key, b"v", px=60_000)
    sampler = Sampler(url, every_s=0.005, probes=(("PTTL", key),))
    try:
        await sampler.start()
        for _ in range(GETS):
            await client.get(key)
        await asyncio.sleep(0.05)  # time is the subject: a few samples while nothing happens
        samples = await sampler.stop()
    finally:
        await client.delete(key)
        await client.aclose()
    assert len(samples) >= 3
    assert [s.t for s in samples] == sorted(s.t for s in samples)
    r = rate(samples[0], samples[-1], "get")
    assert r.count == GETS and r.per_s == pytest.approx(GETS / r.seconds)
    assert all(0 < s.probes[0] <= 60_000 for s in samples)
    assert samples[-1].calls["info"] - samples[0].calls.get("info", 0) == len(samples) - 1
    assert r.client_cpu_per_s >= 0 and 0 <= r.machine_busy <= 1


async def test_a_sampler_that_cannot_sample_fails_loudly(url: str) -> None:
    """A first sample that fails fails start; one that fails in the thread fails stop."""
    refused = Sampler(url, probes=(("NOSUCHCOMMAND",),))
    with pytest.raises(Exception, match=r"(?i)unknown command"):
        await refused.start()
    looks: list[int] = []

    def pids() -> list[int]:  # the lab's PIDs, once; then they cannot be read
        looks.append(1)
        if len(looks) > 1:
            raise RuntimeError("the lab's PIDs are gone")
        return [1]

    failing = Sampler(url, every_s=0.005, pids=pids)
    await failing.start()
    await asyncio.sleep(0.05)  # time is the subject: the thread's first sample fails
    with pytest.raises(RuntimeError, match="PIDs are gone"):
        await failing.stop()


def _sample(t: float, gets: int, lab_cpu: float, redis_cpu: float, busy: float) -> Sample:
    return Sample(t, {"get": gets}, redis_cpu, lab_cpu, busy, t * 2)  # 2 cores


@pytest.mark.parametrize(
    ("per_s", "lab_cpu", "redis_cpu", "busy", "procs", "want"),
    [
        (90_000, 0.5, 0.1, 0.5, 1, "none"),
        (20_000, 0.95, 0.1, 0.5, 1, "client CPU: the Python event loop"),
        (20_000, 0.95, 0.1, 0.5, 2, "client: round trips"),  # 2 procs: neither saturated
        (20_000, 0.5, 0.1, 0.9, 2, "client CPU: the machine's cores are 90% busy"),
        (20_000, 0.3, 0.9, 0.5, 1, "Redis CPU"),
        (20_000, 0.3, 0.2, 0.5, 1, "unclear"),
    ],
)
def test_limit_names_the_side_that_kept_the_rate_down(
    per_s: int, lab_cpu: float, redis_cpu: float, busy: float, procs: int, want: str
) -> None:
    """Met (>= 80 % of the demand), a saturated client, a busy machine with an idle Redis,
    a saturated Redis, or neither: one word for each, from two samples a second apart."""
    r = rate(_sample(10, 0, 0, 0, 0), _sample(11, per_s, lab_cpu, redis_cpu, 2 * busy), "get")
    assert isinstance(r, Rate) and r.per_s == per_s and r.machine_busy == pytest.approx(busy)
    assert limit(r, 100_000, procs).startswith(want)


async def test_preconnect_opens_the_pool_before_the_clock(url: str) -> None:
    """preconnect leaves `count` connections open in the client's pool (at most its size),
    as Redis lists them."""
    name = f"preconnect-test-{uuid.uuid4().hex[:8]}"
    pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=30, client_name=name)
    client = aioredis.Redis(connection_pool=pool)
    observer = aioredis.Redis.from_url(url)

    async def open_ones() -> int:
        return sum(c.get("name") == name for c in await observer.client_list())

    try:
        await preconnect(client, 25)
        assert await open_ones() == 25
        # one DriverInfo for the pool: each connection still tells Redis who it is
        ours = [c for c in await observer.client_list() if c.get("name") == name]
        assert {(c.get("lib-name"), c.get("lib-ver")) for c in ours} == {
            ("redis-py", redis.__version__)
        }
        await preconnect(client, 100)  # capped at the pool's 30
        assert await open_ones() == 30
    finally:
        await client.aclose()
        await observer.aclose()
