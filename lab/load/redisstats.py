"""Redis's own counts over a run: INFO cpu + commandstats, sampled every few ms.

A claim about a rate (GET/s while 5,000 waiters poll) is judged on the server's count,
not the client's, over the window the claim is about. `Sampler` asks Redis for `INFO cpu
commandstats` every `every_s` (one pipeline, with the caller's probe commands in it: the
PTTL of a lock, say), and stamps each answer with `time.perf_counter()` and the CPU
seconds of the lab's processes and of the whole machine at that moment. `rate` reads two
samples as a rate with both sides' CPU; `limit` says which side kept a rate below what
was demanded.

The sampler runs in a thread of the lab's process, on a connection of its own: the
actors' event loop, when it runs in the same process, is the thing that saturates (1,000
pooled waiters in one loop answered an asyncio sampler every 2.5 s instead of every
20 ms), and a thread that wakes from its sleep gets the interpreter within one switch
interval (5 ms). Started after setup and stopped after the actors (a scenario's
Observer), it also watches a sharded run from outside its workers.

`preconnect` opens a client's pooled connections before the clock starts.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.driver_info import DriverInfo

from lab.procs.procstat import machine_cpu, total_cpu_seconds

EVERY_S = 0.05  # about 1 ms of the lab's CPU per sample (INFO parsed, /proc read)
SOCKET_TIMEOUT_S = 5.0  # a Redis that stops answering fails the sampler, never hangs it
DEMAND_MET = 0.8  # share of the demand that counts as met
SATURATED = 0.8  # CPU seconds per second: one core (nearly) busy
CONNECT_CONCURRENCY = 50  # 5,000 connects at once overflow the server's accept backlog


@dataclass(frozen=True)
class Sample:
    """One answer of Redis, with both sides' CPU at the moment it came back."""

    t: float  # time.perf_counter()
    calls: dict[str, int]  # INFO commandstats calls, by command (lower case)
    redis_cpu_s: float  # used_cpu_user + used_cpu_sys
    lab_cpu_s: float  # the lab's processes (`pids()` then)
    machine_busy_s: float  # all cores, since boot (/proc/stat)
    machine_total_s: float
    probes: tuple[Any, ...] = ()  # the replies to the probe commands, in order


def calls_of(info: dict[str, Any]) -> dict[str, int]:
    """Calls per command of an `INFO commandstats` answer."""
    return {
        k.removeprefix("cmdstat_"): int(v.get("calls", 0))
        for k, v in info.items()
        if k.startswith("cmdstat_") and isinstance(v, dict)
    }


def redis_cpu(info: dict[str, Any]) -> float:
    return float(info.get("used_cpu_user", 0)) + float(info.get("used_cpu_sys", 0))


@dataclass
class Sampler:
    """INFO cpu + commandstats (and `probes`) every `every_s` from `start` to `stop`."""

    url: str  # the Redis watched (the sampler opens its own connection)
    every_s: float = EVERY_S
    pids: Callable[[], Sequence[int]] = lambda: [os.getpid()]
    probes: tuple[tuple[Any, ...], ...] = ()  # commands sent with every INFO
    samples: list[Sample] = field(default_factory=list)
    _client: Any = None
    _thread: threading.Thread | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)
    _error: BaseException | None = None

    def sample(self) -> Sample:
        """One sample now (blocking: from a thread, or before a loop runs)."""
        pipe = self._client.pipeline(transaction=False)
        pipe.info("cpu", "commandstats")
        for cmd in self.probes:
            pipe.execute_command(*cmd)
        info, *probed = pipe.execute()
        busy, total = machine_cpu()
        s = Sample(
            time.perf_counter(),
            calls_of(info),
            redis_cpu(info),
            total_cpu_seconds(self.pids()),
            busy,
            total,
            tuple(probed),
        )
        self.samples.append(s)
        return s

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self.every_s):
                self.sample()
        except Exception as exc:  # raised by stop(), in the caller's task
            self._error = exc

    async def start(self) -> None:
        """One sample now, then one every `every_s` in a thread of its own."""
        self._client = redis.Redis.from_url(
            self.url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S
        )
        try:
            await asyncio.to_thread(self.sample)
        except BaseException:
            self._client.close()
            raise
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="redis-sampler", daemon=True)
        self._thread.start()

    async def stop(self) -> list[Sample]:
        """Stop sampling, take one last sample, return them all (in time order); a sample
        that failed in the thread fails here."""
        try:
            if self._thread is not None:
                thread, self._thread = self._thread, None
                self._stopping.set()
                await asyncio.to_thread(thread.join)
            if self._error is not None:
                raise self._error
            await asyncio.to_thread(self.sample)
        finally:
            if self._client is not None:
                self._client.close()
        return self.samples


@dataclass(frozen=True)
class Rate:
    """A command's rate between two samples, and what each side spent meanwhile."""

    seconds: float
    count: int
    per_s: float
    client_cpu_per_s: float
    redis_cpu_per_s: float
    machine_busy: float  # share of all cores busy (the lab, Redis and everyone else)


def rate(first: Sample, last: Sample, command: str) -> Rate:
    seconds = last.t - first.t
    if seconds <= 0:
        raise ValueError("rate needs two samples apart in time")
    count = last.calls.get(command, 0) - first.calls.get(command, 0)
    total = last.machine_total_s - first.machine_total_s
    return Rate(
        seconds,
        count,
        count / seconds,
        (last.lab_cpu_s - first.lab_cpu_s) / seconds,
        (last.redis_cpu_s - first.redis_cpu_s) / seconds,
        min(1.0, (last.machine_busy_s - first.machine_busy_s) / total) if total > 0 else 0.0,
    )


def limit(r: Rate, demand: float, procs: int) -> str:
    """Which side kept `r` below `demand` (procs: the lab's processes running the load)."""
    client, server = r.client_cpu_per_s, r.redis_cpu_per_s
    if r.per_s >= DEMAND_MET * demand:
        return "none: the poll interval sets the rate"
    if client / procs >= SATURATED and client >= 2 * server:
        return "client CPU: the Python event loop is saturated"
    if r.machine_busy >= SATURATED and client >= 2 * server:
        return (
            f"client CPU: the machine's cores are {r.machine_busy:.0%} busy (the lab, Redis "
            f"and other processes); the lab's {procs} process(es) got {client:.2f} CPU-s/s"
        )
    if client >= 2 * server:
        return "client: round trips through a busy event loop; Redis idles"
    if server >= SATURATED:
        return "Redis CPU"
    return "unclear"


async def preconnect(client: Any, count: int) -> None:
    """Open `count` of the client's pooled connections now (at most its pool's size), a
    few at a time, and put them back: connecting inside a timed window is part of what
    it times (lab/load/workload.py opens PostgreSQL's the same way).

    The pool is given one ``DriverInfo`` for all of them: redis-py 8 builds one per
    connection and reads the package's metadata for its version each time, which was half
    of opening 204 connections here (0.37-0.76 s, contended). The same CLIENT SETINFO
    goes to the server."""
    pool = client.connection_pool
    if "driver_info" not in pool.connection_kwargs:  # the caller's own is kept
        pool.connection_kwargs["driver_info"] = DriverInfo()
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def open_one() -> Any:
        async with gate:
            return await pool.get_connection()

    conns = await asyncio.gather(*(open_one() for _ in range(min(count, pool.max_connections))))
    for c in conns:
        await pool.release(c)
