"""Forcing an interleaving between sessions without sleeping and hoping.

A scenario that must show "B runs its statement while A's transaction is still open"
cannot use a plain barrier: B may block *inside* that statement (on A's row lock) and
never reach the barrier, so A would wait for B while B waits for A. The helpers here treat
a session the server reports as waiting on a lock (``pg_blocking_pids()`` naming who holds
it, or is queued ahead of it) as having gone as far as it can:

* ``lock_waiters(db, pids)``: which of these backends wait on a lock, and on whom;
* ``done_or_blocked(db, pid, done)``: wait until an event is set or the backend blocks;
  ``task_or_blocked(db, pid, task)`` the same for a statement's task;
* ``Rendezvous``: a barrier for N sessions at named points, where a party that blocked
  on a lock before reaching the point counts as arrived.

Every wait is bounded: past its timeout it raises ``InterleaveTimeout``, a failure of the
scenario (the interleaving it asked for did not happen), never a silent outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Iterator, Sequence
from typing import Any, Protocol

from lab.aio import within
from lab.errors import ScenarioFailure

TIMEOUT_S = 10.0  # a forced step that has not happened by then will not happen
POLL_S = 0.002  # between two looks at the server

# pg_blocking_pids() reads the lock table itself: non-empty only while the backend waits
# for a heavyweight lock someone holds or is queued for ahead of it (granted: empty at
# once, where pg_stat_activity's wait_event_type may still say 'Lock'). Asked for the
# given pids only: pg_stat_activity would copy every backend slot's status on each look
# (max_connections of them), many times a step.
WAITERS = """
SELECT pid, blocked_by
FROM unnest($1::int[]) AS pid, pg_blocking_pids(pid) AS blocked_by
WHERE cardinality(blocked_by) > 0
"""


class Fetcher(Protocol):
    """Anything with asyncpg's `fetch`: a pool (preferred: waiters may poll at once) or a
    connection nobody else uses meanwhile."""

    async def fetch(self, query: str, *args: Any) -> list[Any]: ...


class InterleaveTimeout(ScenarioFailure):
    """A forced interleaving did not happen in time: the scenario's choreography is wrong,
    or the server is far slower than expected."""


async def lock_waiters(db: Fetcher, pids: Collection[int]) -> dict[int, list[int]]:
    """Those of `pids` waiting on a heavyweight lock, each with the pids blocking it."""
    if not pids:
        return {}
    rows = await db.fetch(WAITERS, list(pids))
    return {int(r["pid"]): [int(p) for p in r["blocked_by"]] for r in rows}


async def done_or_blocked(
    db: Fetcher,
    pid: int,
    done: asyncio.Event,
    *,
    timeout: float = TIMEOUT_S,
    what: str = "session",
) -> list[int] | None:
    """Wait until `done` is set (None) or backend `pid` waits on a lock (its blockers)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done.is_set():
        waits = await lock_waiters(db, [pid])
        if pid in waits:
            return waits[pid]
        if loop.time() > deadline:
            raise InterleaveTimeout(
                f"{what} (pid {pid}) neither finished nor blocked in {timeout} s"
            )
        with contextlib.suppress(TimeoutError):
            await within(done.wait(), POLL_S)
    return None


async def task_or_blocked(
    db: Fetcher,
    pid: int,
    task: asyncio.Future[Any],
    *,
    timeout: float = TIMEOUT_S,
    what: str = "session",
) -> list[int] | None:
    """None once `task` (a statement on backend `pid`) has finished, or the pids the server
    shows `pid` waiting for."""
    done = asyncio.Event()
    task.add_done_callback(lambda _: done.set())
    return await done_or_blocked(db, pid, done, timeout=timeout, what=what)


class Rendezvous:
    """A barrier for `parties` sessions at named `points`, safe when a party blocks on a lock.

    A party arriving at a point goes on once every other party has arrived there too, has
    left (finished, whatever its end), or is reported by the server as waiting on a lock
    before it could get there. ``waited[party]`` records the first point a party had not
    reached when it was seen blocked: "buyer 1 was blocked on its way to `write`".
    """

    def __init__(
        self,
        db: Fetcher,
        parties: int,
        points: Sequence[str],
        *,
        timeout: float = TIMEOUT_S,
    ) -> None:
        self.db = db
        self.parties = parties
        self.points = tuple(points)
        self.timeout = timeout
        self.pids: dict[int, int] = {}
        self.reached: dict[int, set[str]] = {p: set() for p in range(parties)}
        self.left: set[int] = set()
        self.waited: dict[int, set[str]] = {p: set() for p in range(parties)}
        self._changed = asyncio.Event()

    @contextlib.contextmanager
    def party(self, party: int, pid: int) -> Iterator[None]:
        """Take part as `party` with backend `pid`; leaving the block, however, is leaving."""
        if not 0 <= party < self.parties:
            raise ValueError(f"party {party} of a {self.parties}-party rendezvous")
        self.pids[party] = pid
        self._notify()
        try:
            yield
        finally:
            self.left.add(party)
            self._notify()

    async def arrive(self, party: int, point: str) -> dict[int, list[int]]:
        """Mark `party` at `point` and wait for the others; returns the parties that were
        blocked on a lock (with their blockers) when this one went on."""
        if point not in self.points:
            raise ValueError(f"unknown point {point!r} (points: {', '.join(self.points)})")
        self.reached[party].add(point)
        self._notify()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            pending = [
                p
                for p in range(self.parties)
                if p != party and p not in self.left and point not in self.reached[p]
            ]
            if not pending:
                return {}
            if all(p in self.pids for p in pending):
                waits = await lock_waiters(self.db, [self.pids[p] for p in pending])
                blocked = {p: waits[self.pids[p]] for p in pending if self.pids[p] in waits}
                if len(blocked) == len(pending):
                    for p in blocked:
                        self.waited[p].add(self._next_point(p))
                    return blocked
            if loop.time() > deadline:
                absent = [p for p in pending if p not in self.pids]
                why = f"; {absent} never joined (no free connection?)" if absent else ""
                raise InterleaveTimeout(
                    f"party {party} at {point!r}: parties {pending} neither arrived, "
                    f"left nor blocked in {self.timeout} s{why}"
                )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await within(self._changed.wait(), POLL_S)

    def _next_point(self, party: int) -> str:
        return next((pt for pt in self.points if pt not in self.reached[party]), self.points[-1])

    def _notify(self) -> None:
        self._changed.set()
