"""A "service" of service-lock-order: a process that locks two Redis keys in its own order.

The lab's worker protocol: one JSON config line on stdin, ``{"event": "ready"}`` on
stdout, then one stdin line (``go``) grants each step: take the first key, take the
second key. A key is taken with ``SET key token NX`` (no TTL: the lock outlives any wait,
as a long TTL does), polled every POLL_MS until it succeeds: no deadlock detector, no
timeout. While it waits it says so every HEARTBEAT_MS with its count of tries. With both
keys it works, releases both by compare-and-delete and says ``done``.

`Service` below is the lab's side: start, grant, read events, kill by PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.aio import within
from lab.errors import ScenarioFailure
from lab.redislock import COMPARE_AND_DELETE

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from lab.scenario import Env

POLL_MS = 5  # the spin: one SET NX every POLL_MS while the key is busy
HEARTBEAT_MS = 100  # a waiting service reports its tries this often
SCRIPT = str(Path(__file__).resolve())


def _emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.perf_counter(), **fields}) + "\n")
    sys.stdout.flush()


async def take(redis: aioredis.Redis, key: str, token: str) -> None:
    """SET NX until it succeeds; no TTL, no timeout, no detector."""
    tries, last = 0, 0.0
    while not await redis.set(key, token, nx=True):
        tries += 1
        now = time.monotonic()
        if tries == 1 or now - last >= HEARTBEAT_MS / 1000:
            _emit("waiting", key=key, tries=tries)
            last = now
        await asyncio.sleep(POLL_MS / 1000)
    _emit("holding", key=key, tries=tries)


async def _main() -> None:
    import redis.asyncio as aioredis

    cfg = json.loads(await asyncio.to_thread(sys.stdin.readline))
    redis = aioredis.Redis.from_url(cfg["redis_url"])
    try:
        await redis.ping()
        _emit("ready", pid=os.getpid())
        for key in cfg["keys"]:
            if (await asyncio.to_thread(sys.stdin.readline)).strip() != "go":
                return
            await take(redis, key, cfg["token"])
        _emit("working")
        for key in reversed(cfg["keys"]):
            await redis.eval(COMPARE_AND_DELETE, 1, key, cfg["token"])
        _emit("done")
    finally:
        await redis.aclose()


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when the lab (`parent`) dies; if it already has, exit now."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the lab died before prctl took effect: no signal will come
        os._exit(0)


# --- the lab's side ----------------------------------------------------------------------------


class Service:
    """One service process; its events land in `events` as they come, stamped on the run clock."""

    def __init__(self, env: Env, name: str, proc: asyncio.subprocess.Process) -> None:
        self.env, self.name, self.proc = env, name, proc
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.last: dict[str, dict[str, Any]] = {}
        self.reader: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, env: Env, name: str, cfg: dict[str, Any]) -> Service:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, SCRIPT, str(os.getpid()), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        self = cls(env, name, proc)
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(cfg) + "\n").encode())  # secrets via the pipe, not argv
        await proc.stdin.drain()
        self.reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while raw := await self.proc.stdout.readline():
            ev = json.loads(raw)
            ev["t_ms"] = (ev.pop("t") - self.env.t0) * 1000
            self.last[ev["event"]] = ev
            if ev["event"] != "waiting" or ev["tries"] == 1:  # heartbeats stay out of the trace
                fields = {k: v for k, v in ev.items() if k not in ("event", "t_ms")}
                self.env.trace(self.name, ev["event"], at_ms=ev["t_ms"], **fields)
            await self.events.put(ev)
        await self.events.put({"event": "exit"})

    async def expect(self, *events: str, timeout: float = 20.0) -> dict[str, Any]:
        """The next event that is one of `events` (heartbeats skipped), bounded."""
        while True:
            try:
                ev = await within(self.events.get(), timeout)
            except TimeoutError:
                raise ScenarioFailure(
                    f"{self.name}: no {'/'.join(events)} in {timeout} s"
                ) from None
            if ev["event"] in events:
                return ev
            if ev["event"] != "waiting":
                raise ScenarioFailure(f"{self.name}: {ev} while expecting {'/'.join(events)}")

    async def grant(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        await self.proc.stdin.drain()

    async def close(self) -> None:
        """SIGKILL by PID (nothing to release: a frozen service never will), then reap."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await within(self.proc.wait(), 10)
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(BaseException):
                await self.reader


if __name__ == "__main__":
    _die_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid())  # the lab's PID
    asyncio.run(_main())
