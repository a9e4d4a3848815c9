"""The explored Redis as the director sees it: what a command touched, whose lease a key
is, and time as a step.

What a command touched is the server's own answer: ``COMMAND GETKEYSANDFLAGS`` names the
keys of any command (a script's declared KEYS included) and whether it reads or writes
each. Two Redis steps commute when neither writes a key the other touches (the rule of
lab/pinned/footprint.py, with keys for relations). A command whose keys the server
cannot name (``KEYS``, ``FLUSHALL``, ``SCAN``...) commutes with nothing. A Lua script
that touches a key it did not declare is outside the rule: Redis asks scripts to
declare every key, and explore trusts that they do.

A lease is a key with an expiry. A step that gave a key a new expiry
(``PEXPIRETIME`` moved) makes that key its actor's lease. Time is a step: while the
lease's actor is held at the gate (it has a statement waiting), "its lease ran out" is
one more candidate at that point, as a pause that outlasts the TTL would make it. Taking
it moves the key's expiry to 1 ms from now and waits until the server reports the key
gone (``PTTL`` -2): the server expires it on its own clock, as it would have after the
whole TTL, without the wait.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from lab.errors import LabError
from lab.pinned.footprint import Footprint

WRITE_FLAGS = frozenset({b"RW", b"OW", b"RM"})
GONE_S = 5.0  # a key whose expiry was brought forward is gone within this (the server's)


@dataclass
class Keys:
    """The keys one step touched, as the server names them."""

    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    unknown: str = ""  # a command whose keys the server cannot name


@dataclass
class RedisSide:
    """The director's view of the explored Redis (see the module doc); `pauses` names the
    actors whose leases may run out (None: every actor's)."""

    client: aioredis.Redis
    host: str
    port: int
    password: str  # the gate's login (lab/gate/redisgate.py); never an actor's
    pauses: frozenset[int] | None = None
    owner: dict[str, int] = field(default_factory=dict)  # a lease's key -> its actor

    async def _ask(self, *words: object) -> Any:
        return await self.client.execute_command(*words)  # type: ignore[no-untyped-call]

    async def reset(self, setup: Sequence[list[str]]) -> None:
        """An empty Redis filled by the setup's commands, for one order."""
        self.owner.clear()
        await self.client.flushdb()
        for words in setup:
            try:
                await self._ask(*words)
            except ResponseError as exc:
                raise LabError(f"the Redis setup failed at {' '.join(words)!r}: {exc}") from None

    async def keys(self, commands: Sequence[list[bytes]]) -> Keys:
        """What the commands of one step touch (a MULTI block: every command in it)."""
        found = Keys()
        for words in commands:
            if words[0].upper() in (b"MULTI", b"EXEC"):
                continue
            try:
                pairs = await self._ask("COMMAND GETKEYSANDFLAGS", *words)  # no reply callback
            except ResponseError:
                found.unknown = f"the server names no key of {words[0].decode(errors='replace')}"
                continue
            for key, flags in pairs:
                name = key.decode(errors="replace")
                (found.writes if WRITE_FLAGS & set(flags) else found.reads).add(name)
        return found

    async def expiries(self, keys: Collection[str]) -> dict[str, int]:
        """Each key's expiry (PEXPIRETIME: -1 none, -2 no key)."""
        if not keys:
            return {}
        async with self.client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.execute_command("PEXPIRETIME", key)
            return dict(zip(keys, await pipe.execute(), strict=True))

    def footprint(self, actor: int, keys: Keys) -> Footprint:
        """The footprint of a Redis step: its keys, in a namespace of their own (it takes
        no snapshot: a PostgreSQL commit moves past it, lab/gate/commits.py)."""
        return Footprint(
            actor,
            frozenset(f"redis {k}" for k in keys.reads),
            frozenset(f"redis {k}" for k in keys.writes),
            keys.unknown,
            fresh=True,
        )

    def leased(self, actor: int, before: dict[str, int], after: dict[str, int]) -> None:
        """Note the keys whose expiry the actor's step set as that actor's leases."""
        for key, when in after.items():
            if when > 0 and when != before.get(key):
                self.owner[key] = actor

    async def leases(self, held: Collection[int]) -> list[tuple[str, int]]:
        """(key, actor) of each lease that may run out now: its actor is held, may pause,
        and the key still has its expiry."""
        mine = {k: a for k, a in self.owner.items() if a in held}
        if self.pauses is not None:
            mine = {k: a for k, a in mine.items() if a in self.pauses}
        now = await self.expiries(sorted(mine))
        return [(k, mine[k]) for k in sorted(mine) if now.get(k, -2) > 0]

    async def run_out(self, key: str) -> int:
        """Expire `key` now on the server's clock; the PTTL it had left."""
        left = int(await self.client.pttl(key))
        await self.client.pexpire(key, 1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GONE_S
        while await self.client.pttl(key) != -2:
            if loop.time() > deadline:
                raise LabError(f"Redis did not expire {key!r} in {GONE_S:.0f} s")
            await asyncio.sleep(0.001)  # the server's clock: 1 ms is its resolution here
        self.owner.pop(key, None)
        return left

    async def blocked(self, ids: Collection[int]) -> set[int]:
        """Which client ids the server reports blocked (BLPOP, WAIT...: flag 'b')."""
        if not ids:
            return set()
        text = await self._ask("CLIENT", "LIST", "ID", *ids)
        if isinstance(text, bytes):
            text = text.decode()
        found = set()
        for line in str(text).splitlines():
            fields = dict(p.split("=", 1) for p in line.split() if "=" in p)
            if "b" in fields.get("flags", ""):
                found.add(int(fields["id"]))
        return found


def setup_commands(text: str) -> list[list[str]]:
    """A --redis-setup file: one command a line, words as a shell splits them; blank
    lines and lines starting with # are skipped."""
    commands = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            commands.append(shlex.split(line))
        except ValueError as exc:
            raise LabError(f"--redis-setup line {number}: {exc}") from None
    return commands
