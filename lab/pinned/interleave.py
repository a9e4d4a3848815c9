"""The server's look at a session: is it waiting on a lock, and on whom.

A session that must run "while A's transaction is still open" may block *inside* its
statement (on A's row lock); the helpers here treat a session the server reports as
waiting on a lock (``pg_blocking_pids()`` naming who holds it, or is queued ahead of it)
as having gone as far as it can. The Sequencer (lab/pinned/sequencer.py), the one
ordering engine, looks with ``lock_waiters``; a load's probe waits with the other two:

* ``lock_waiters(db, pids)``: which of these backends wait on a lock, and on whom;
* ``done_or_blocked(db, pid, done)``: wait until an event is set or the backend blocks;
  ``task_or_blocked(db, pid, task)`` the same for a statement's task.

Every wait is bounded: past its timeout it raises ``InterleaveTimeout``, a failure of the
scenario (the interleaving it asked for did not happen), never a silent outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
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
