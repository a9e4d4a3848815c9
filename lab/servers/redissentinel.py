"""A Redis primary, its replica and three Sentinels a run owns, for failovers as they happen.

Every part is a real `redis-server` on loopback, started through the embedded servers'
classes (so each dies with the lab) and stopped by PID in `close`:

- the primary, and a replica that reaches it through the lab's delay proxy (no delay), so
  the lab can partition the replication link with `cut()`: both servers keep their
  connection, nothing passes, as when a network drops packets;
- three `redis-server --sentinel` processes monitoring the primary under one name, quorum
  2, `down-after-milliseconds` small so a run stays short. They, not the lab, decide that
  the primary is down, elect a leader among themselves and promote the replica; clients
  find the primary by asking them (redis-py's `Sentinel`).

`Events` subscribes to every Sentinel's event channels and keeps what they announce
(`+sdown`, `+odown`, `+switch-master`, ...) with the time each was seen.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel

from lab.aio import until
from lab.errors import LabError, ScenarioFailure
from lab.procs import netdelay
from lab.procs.lifecycle import stop_pid
from lab.servers.embedded import EmbeddedRedis, make_base_dir, remove_base_dir

NAME = "lab"  # the monitored primary's name, as clients ask the Sentinels for it
SENTINELS = 3
QUORUM = 2
DOWN_AFTER_MS = 300  # unanswered PINGs this long: the primary is subjectively down
# Long against a run: a Sentinel would otherwise repoint a replica whose master address
# is not the primary's own (ours is the link proxy's) after this long ("+fix-slave-config").
FAILOVER_TIMEOUT_MS = 60_000
# Once the primary is down the Sentinels cannot "fix" the replica's master address (that
# needs a sane primary), so the timeout is cut to this: an election lost to a split vote
# (-failover-abort-not-elected) is tried again 2x this later, not 2x 60 s.
RETRY_TIMEOUT_MS = 2_000
READY_S = 20.0  # Sentinels find the replica and each other (hello messages every 2 s)
EVENTS = (
    "+sdown",
    "+odown",
    "+new-epoch",
    "+try-failover",
    "+vote-for-leader",
    "+elected-leader",
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
    "+selected-slave",
    "+promoted-slave",
    "+switch-master",
    "+failover-end",
    "-odown",
    "-sdown",
)


@dataclass
class SentinelGroup:
    """A primary, its replica behind a cuttable link, and the Sentinels watching them."""

    base: Path
    primary: EmbeddedRedis
    replica: EmbeddedRedis
    sentinels: list[EmbeddedRedis]
    link: netdelay.Proxy | None = None
    down_after_ms: int = DOWN_AFTER_MS

    @classmethod
    def prepare(cls, k: int = SENTINELS, down_after_ms: int = DOWN_AFTER_MS) -> SentinelGroup:
        """The servers found and configured, none started: register `close` first."""
        base = make_base_dir()
        try:
            # A replica's first full sync waits repl-diskless-sync-delay (5 s) by default.
            primary = EmbeddedRedis.create(base, "primary", ("--repl-diskless-sync-delay", "0"))
            replica = EmbeddedRedis.create(base, "replica")
            sentinels = [EmbeddedRedis.create(base, f"sentinel{i + 1}") for i in range(k)]
        except BaseException:
            remove_base_dir(base)
            raise
        return cls(base, primary, replica, sentinels, down_after_ms=down_after_ms)

    def start_primary(self) -> None:
        self.primary.start()

    def start_link(self) -> None:
        """The replication link's proxy. From the thread that lives as long as the run
        (the event loop's): the proxy dies with the thread that started it."""
        self.link = netdelay.spawn(self.primary.port, 0.0)

    def start_rest(self) -> None:
        """The replica (through the link) and the Sentinels, once primary and link run."""
        if self.link is None:
            raise LabError("sentinel group: the replication link is not started")
        password = self.primary.password  # one password for every part of the group
        self.replica.password = self.replica.masterauth = password
        self.replica.extra_args = ("--replicaof", "127.0.0.1", str(self.link.port))
        self.replica.start()
        for s in self.sentinels:
            s.password = password
            s.extra_args = ("--sentinel",)
            s.conf = (
                f"sentinel sentinel-pass {password}",
                f"sentinel monitor {NAME} 127.0.0.1 {self.primary.port} {QUORUM}",
                f"sentinel auth-pass {NAME} {password}",
                f"sentinel down-after-milliseconds {NAME} {self.down_after_ms}",
                f"sentinel failover-timeout {NAME} {FAILOVER_TIMEOUT_MS}",
                f"sentinel parallel-syncs {NAME} 1",
            )
            s.start()

    async def ready(self) -> None:
        """Until every Sentinel knows the replica and the other Sentinels (what they say)."""

        async def knows(s: EmbeddedRedis) -> bool:
            client = self.sentinel_client(s)
            try:
                ask = client.execute_command  # redis-py's: not annotated
                state = await ask("SENTINEL", "MASTER", NAME)  # type: ignore[no-untyped-call]
            finally:
                await client.aclose()
            info = _pairs(state)
            return (
                info.get("num-slaves") == "1"
                and info.get("num-other-sentinels") == str(len(self.sentinels) - 1)
                and info.get("flags") == "master"
            )

        async def all_know() -> bool:
            return all(await asyncio.gather(*(knows(s) for s in self.sentinels)))

        await until(
            all_know, READY_S, "the Sentinels to find the replica and each other", every=0.05
        )

    async def until_synced(self, seconds: float) -> None:
        """Until the replica is linked and has everything the primary has (as the two say
        on the lab's own connections)."""
        primary, replica = self.direct(self.primary), self.direct(self.replica)

        async def synced() -> bool:
            info = await replica.info("replication")
            offset = (await primary.info("replication")).get("master_repl_offset")
            linked = info.get("master_link_status") == "up"
            return linked and info.get("slave_repl_offset") == offset

        try:
            await until(synced, seconds, "the replica to catch up")
        finally:
            await primary.aclose()
            await replica.aclose()

    async def partition(self) -> None:
        """`cut()`, from the event loop."""
        await asyncio.to_thread(self.cut)

    def cut(self) -> None:
        """Partition the replication link: the primary's writes no longer reach the replica."""
        if self.link is None:
            raise LabError("sentinel group: no replication link to cut")
        self.link.cut()

    def kill_primary(self) -> None:
        """SIGKILL the primary; then every Sentinel's failover-timeout is cut to
        RETRY_TIMEOUT_MS, so that an election that fails (a split vote, likelier on a
        busy machine) is retried within seconds. The Sentinels still decide everything."""
        stop_pid(self.primary.pid, sig=signal.SIGKILL)
        for s in self.sentinels:
            client = redis.Redis(host="127.0.0.1", port=s.port, password=s.password)
            try:
                ask = client.execute_command  # redis-py's: not annotated
                cut = ("SENTINEL", "SET", NAME, "failover-timeout", str(RETRY_TIMEOUT_MS))
                ask(*cut)  # type: ignore[no-untyped-call]
            except redis.RedisError:
                pass  # a Sentinel that does not answer keeps its own; the others decide
            finally:
                client.close()

    def sentinel(self, **kwargs: Any) -> Sentinel:
        """A client that finds the primary by asking the Sentinels (holds the password)."""
        password = self.primary.password
        return Sentinel(
            [("127.0.0.1", s.port) for s in self.sentinels],
            sentinel_kwargs={"password": password},
            password=password,
            **kwargs,
        )

    def sentinel_client(self, s: EmbeddedRedis) -> aioredis.Redis:
        return aioredis.Redis(
            host="127.0.0.1", port=s.port, password=s.password, decode_responses=True
        )

    def direct(self, server: EmbeddedRedis) -> aioredis.Redis:
        """The lab's own observer connection to one server, bypassing the Sentinels."""
        return aioredis.Redis.from_url(server.url(), decode_responses=True, retry_on_timeout=False)

    def address(self, server: EmbeddedRedis) -> str:
        return f"127.0.0.1:{server.port}"

    def info(self) -> dict[str, Any]:
        """What a record may say about the group: versions and addresses, no password."""
        return {
            "sentinels": len(self.sentinels),
            "quorum": QUORUM,
            "down_after_ms": self.down_after_ms,
            "failover_timeout_ms": FAILOVER_TIMEOUT_MS,
            "failover_timeout_after_kill_ms": RETRY_TIMEOUT_MS,
            "version": self.primary.version,
            "primary": self.address(self.primary),
            "replica": self.address(self.replica),
        }

    def failover(self, events: Events, new_primary: str, **more: Any) -> dict[str, Any]:
        """`evidence.failover`: who promoted whom, and what the Sentinels announced when
        (ms after `events.mark()`), in order."""
        switched = events.first("+switch-master")
        return {
            "by": "sentinel",
            **self.info(),
            "old_primary": self.address(self.primary),
            "new_primary": new_primary,
            "switch_ms": switched["t_ms"] if switched else None,
            **more,
            "events": sorted(events.seen, key=lambda e: float(e["t_ms"])),
        }

    def close(self) -> None:
        for s in self.sentinels:
            s.stop()
        self.replica.stop()
        self.primary.stop()
        if self.link is not None:
            self.link.stop()
        remove_base_dir(self.base)


def _pairs(flat: Any) -> dict[str, str]:
    """SENTINEL MASTER's reply (a flat list, or a dict under RESP3) as a dict of strings."""
    if isinstance(flat, dict):
        return {str(k): str(v) for k, v in flat.items()}
    items = list(flat)
    return {str(items[i]): str(items[i + 1]) for i in range(0, len(items) - 1, 2)}


@dataclass
class Events:
    """What the Sentinels announce, as they announce it: one subscription per Sentinel."""

    group: SentinelGroup
    t0: float = field(default_factory=time.monotonic)
    seen: list[dict[str, Any]] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _clients: list[aioredis.Redis] = field(default_factory=list)

    async def start(self) -> Events:
        for i, s in enumerate(self.group.sentinels):
            client = self.group.sentinel_client(s)
            self._clients.append(client)
            pubsub = client.pubsub()
            await pubsub.subscribe(*EVENTS)
            self._tasks.append(asyncio.create_task(self._listen(f"sentinel{i + 1}", pubsub)))
        return self

    async def _listen(self, who: str, pubsub: Any) -> None:
        async for msg in pubsub.listen():
            if msg.get("type") == "message":
                ms = round((time.monotonic() - self.t0) * 1000, 1)
                self.seen.append(
                    {"t_ms": ms, "sentinel": who, "event": msg["channel"], "detail": msg["data"]}
                )

    def mark(self) -> None:
        """Times are counted from now (the moment the lab breaks something)."""
        self.t0 = time.monotonic()

    def first(self, event: str) -> dict[str, Any] | None:
        return next((e for e in self.seen if e["event"] == event), None)

    async def promoted(self, seconds: float) -> str:
        """Until a Sentinel announces +switch-master: the new primary's address."""
        switched = await self.wait_for("+switch-master", seconds)
        _name, _old_ip, _old_port, ip, port = str(switched["detail"]).split()
        return f"{ip}:{port}"

    async def wait_for(self, event: str, seconds: float) -> dict[str, Any]:
        def announced() -> dict[str, Any] | None:
            return self.first(event)

        try:
            found = await until(
                announced, seconds, f"the Sentinels to announce {event}", every=0.01
            )
        except ScenarioFailure as exc:  # say what they did announce
            said = ", ".join(f"{e['event']}@{e['t_ms']:.0f}ms" for e in self.seen) or "nothing"
            raise type(exc)(f"{exc}; they announced: {said}") from None
        return found or {}  # until returns only what is truthy

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for client in self._clients:
            await client.aclose()
