"""The release of a Redis lock the documents recommend, shared by every scenario that takes one.

"DEL only if the value is still mine", atomic inside Redis: a holder whose lease expired
and was taken over cannot delete the next holder's lock. Call it with the lock's key and
the holder's token: ``await redis.eval(COMPARE_AND_DELETE, 1, key, token)`` returns 1 when
it deleted, 0 when the lock was gone or someone else's. `Redlock` takes one lock over
several independent masters with the same release.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from lab.aio import within

if TYPE_CHECKING:
    import redis.asyncio as aioredis

COMPARE_AND_DELETE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) "
    "else return 0 end"
)


# --- Redlock: one lock over N independent masters ------------------------------------------

CLOCK_DRIFT_FACTOR = 0.01  # the reference implementation's: drift = TTL * 0.01 + 2 ms
CLOCK_DRIFT_MIN_MS = 2.0
NODE_TIMEOUT_S = 0.1  # per-node reply bound, small against the TTL (the algorithm's advice)


@dataclass(frozen=True)
class Grant:
    """What one acquisition attempt saw: votes, time spent, and the validity left."""

    votes: int
    nodes: int
    elapsed_ms: float
    validity_ms: float  # TTL - drift - elapsed; the lock is "held" only while this is > 0

    @property
    def won(self) -> bool:
        return self.votes >= self.nodes // 2 + 1 and self.validity_ms > 0


@dataclass
class Redlock:
    """The Redlock algorithm: SET key token NX PX ttl on every node, won by a majority
    within the TTL; released (also after a lost attempt) by compare-and-delete on every node.

    It gives the holder a *belief* with a deadline (`validity_ms` from the start of the
    attempt), measured on the holder's own clock: nothing in it survives a holder that
    stops running after the check.
    """

    nodes: Sequence[aioredis.Redis]
    key: str
    ttl_ms: int
    token: str

    async def _set(self, node: aioredis.Redis) -> bool:
        try:
            return bool(
                await within(
                    node.set(self.key, self.token, nx=True, px=self.ttl_ms), NODE_TIMEOUT_S
                )
            )
        except (TimeoutError, OSError, RedisError):
            return False  # a node that does not answer in time is a vote lost

    async def acquire(self) -> Grant:
        start = time.monotonic()
        votes = sum(await asyncio.gather(*(self._set(n) for n in self.nodes)))
        elapsed = (time.monotonic() - start) * 1000
        drift = self.ttl_ms * CLOCK_DRIFT_FACTOR + CLOCK_DRIFT_MIN_MS
        grant = Grant(votes, len(self.nodes), elapsed, self.ttl_ms - drift - elapsed)
        if not grant.won:
            await self.release()  # a lost attempt frees the nodes it did win
        return grant

    async def _del(self, node: aioredis.Redis) -> int:
        try:
            return int(
                await within(node.eval(COMPARE_AND_DELETE, 1, self.key, self.token), NODE_TIMEOUT_S)
            )
        except (TimeoutError, OSError, RedisError):
            return 0

    async def release(self) -> list[int]:
        """Per node: 1 when it deleted this holder's key, 0 when it was gone or another's."""
        return list(await asyncio.gather(*(self._del(n) for n in self.nodes)))
