"""cache-stampede's observer: what Redis saw while the waiters waited.

The harness starts it after setup and stops it after the requests, before the invariant
(in the lab's own process, also when the requests ran in worker processes). Meanwhile a
lab.load.redisstats.Sampler asks Redis every SAMPLE_S for INFO cpu + commandstats and the
lock's PTTL, with the CPU seconds of the lab's processes and of the machine. At stop it
leaves as evidence:

- ``wait_window`` (DL-20): the window runs from the first rebuild's start to the first
  cache write, as the process that rebuilt traced them; its rate is Redis's GET count
  between the first and the last sample inside it, against the demand (waiters x
  1000/poll_ms), with the poll cycle per waiter, both sides' CPU, how busy the machine
  was and which side limits; then, with -p reference=true, `redis-benchmark -t get` on
  the same Redis (lab/load/redisbench.py).
- counters ``max_concurrent_rebuilds`` (the invariant's) and ``rebuilds_after_fill``, from
  the rebuilds every process traced.
- ``lock_pttl_after_failure_ms`` (DL-21, no finally): the lock's PTTL in the first
  sample PROBE_DELAY_S after a rebuild threw (-2: no lock).
"""

from __future__ import annotations

import math
from typing import Any

from lab.core.scenario import Env, Observer
from lab.errors import LabError
from lab.load.redisbench import redis_benchmark
from lab.load.redisstats import Sample, Sampler, limit, rate
from scenarios.cache_stampede.cache_stampede import KEY, LOCK

SAMPLE_S = 0.05  # 20 samples in the 1 s rebuild of DL-20; ~1 ms of CPU each
PROBE_DELAY_S = 0.05  # after a failed rebuild, when the lock's PTTL is read
REFERENCE_CLIENTS = 5000  # redis-benchmark -c: one connection per waiter, as the pooled client


async def start(env: Env) -> None:
    sampler = Sampler(
        env.redis_url,
        every_s=SAMPLE_S,
        pids=lambda: env.lab_pids,  # the lab and, in a sharded run, its workers
        probes=(("PTTL", env.key(LOCK)),),
    )
    env.state["sampler"] = sampler
    await sampler.start()


async def stop(env: Env) -> None:
    samples: list[Sample] = await env.state.pop("sampler").stop()
    at = [(s.t - env.t0) * 1000 for s in samples]  # on the trace's clock (ms since release)
    rebuilds = [e for e in env.events if e["who"] == "db"]
    fills = [e["t_ms"] for e in env.events if e["who"] == "cache" and e["key"] == KEY]
    _count_rebuilds(env, [(e["t_ms"], e["end_ms"]) for e in rebuilds], min(fills, default=math.inf))
    failed = next((e["end_ms"] for e in rebuilds if e["failed"]), None)
    if failed is not None:
        later = [s for s, t in zip(samples, at, strict=True) if t >= failed + PROBE_DELAY_S * 1000]
        env.extra_evidence["lock_pttl_after_failure_ms"] = int((later or samples[-1:])[0].probes[0])
    window: dict[str, Any] = {}
    if rebuilds and fills:
        opened, closed = rebuilds[0]["t_ms"], min(fills)
        inside = [s for s, t in zip(samples, at, strict=True) if opened <= t <= closed]
        if len(inside) >= 2 and inside[-1].t > inside[0].t:
            window = _evidence(env, inside[0], inside[-1], closed - opened, len(inside))
    if window and env.params["reference"] and env.variant == "buggy":
        window["redis_benchmark"] = await _reference(env)
    env.extra_evidence["wait_window"] = window


def _count_rebuilds(env: Env, spans: list[tuple[float, float]], filled: float) -> None:
    """Over every process's rebuilds (the trace's spans): the most that ran at once (the
    invariant's count), and those that began after the cache was filled: a waiter whose GET
    missed just before the write and whose SET NX came after the DEL."""
    most = max((sum(s <= t < end for s, end in spans) for t, _ in spans), default=0)
    env.counters["max_concurrent_rebuilds"] = most
    if late := sum(s >= filled for s, _ in spans):
        env.counters["rebuilds_after_fill"] = late


def _evidence(env: Env, first: Sample, last: Sample, window_ms: float, n: int) -> dict[str, Any]:
    """The wait window's GET rate as Redis counted it, the demand, and both sides' CPU."""
    r = rate(first, last, "get")
    pollers = env.n - 1 if env.variant == "buggy" else env.params["pods"] - 1  # fixed: leaders
    demand = pollers * 1000 / env.params["poll_ms"]
    procs = max(1, len(env.lab_pids) - 1)  # the lab alone, or its K workers
    return {
        "ms": round(r.seconds * 1000, 1),  # between the first and last sample inside
        "window_ms": round(window_ms, 1),  # first rebuild's start to first cache write
        "samples": n,
        "gets": r.count,  # as Redis counted them (INFO commandstats)
        "get_per_s": round(r.per_s),
        "demand_get_per_s": round(demand),
        "poll_cycle_ms": round(pollers * r.seconds * 1000 / r.count, 1) if r.count else None,
        "client_cpu_per_s": round(r.client_cpu_per_s, 3),
        "client_procs": procs,
        "redis_cpu_per_s": round(r.redis_cpu_per_s, 3),
        "machine_busy": round(r.machine_busy, 3),
        "limit": limit(r, demand, procs),
    }


async def _reference(env: Env) -> dict[str, Any]:
    """What this Redis serves to redis-benchmark with one connection per waiter, now."""
    try:  # the actors' pooled connections are closed first: Redis's maxclients
        await env.redis.connection_pool.disconnect()
        return await redis_benchmark(env.redis_url, min(env.n, REFERENCE_CLIENTS))
    except LabError as exc:
        return {"error": str(exc)}


OBSERVER = Observer("wait-window", start, stop)
