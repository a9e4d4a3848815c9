"""What one step touched, as the server shows it: its footprint, and when two commute.

Two steps of different sessions *commute* when running them in either order leaves the
same database and gives each the same result; orders that differ only by swapping
neighbours that commute end the same way. Both explorers read commutation from the
server, never from the SQL text (the gate's, lab/gate/reduce.py; the pinned one's,
lab/pinned/explore.py with `reduce`):

* Before and after each step, ``pg_locks`` for the step's session: the relations
  (tables, indexes, sequences) and other objects its transaction has locked, and in
  which mode. ``AccessShareLock`` and ``SIReadLock`` are reads; every other mode is a
  write (``ROW SHARE`` of ``FOR UPDATE`` included). A transaction keeps its locks to its
  end, so before and after together cover the step.
* Two footprints conflict when one writes an object the other reads or writes. Steps
  of the same session (actor) always conflict: the program orders them.
* A step that ends a transaction that wrote (``COMMIT``, ``ROLLBACK``) commutes with
  nothing: a commit decides what every snapshot taken after it sees, and under
  REPEATABLE READ or SERIALIZABLE a transaction's first statement fixes its snapshot for
  every later one, whatever it reads. Keeping commits in place keeps every snapshot as
  it was. A transaction that wrote nothing has no transaction id (``backend_xid`` is
  null), so no snapshot lists it and its end changes what no one sees: its end touches
  only the locks it lets go of, read before the step. That holds when no id was given
  out during the step (the next id, ``txid_snapshot_xmax``, did not move: one simple
  query may write and commit at once) and the transaction held no ``SIReadLock``
  (a serializable transaction's end moves its read-write conflicts, which no lock shows).
* A step also commutes with nothing when the server cannot show what it touched: it ran
  statements outside a transaction (status I before and after, and the session's
  ``state_change`` moved: its locks are gone by the time anyone looks), it began a
  transaction after statements that wrote and committed on their own (status I before,
  T after, and the next id moved: an id was given out and its transaction ended; the
  new transaction's own id, still open, does not move it), it ended one
  transaction and began another, it names an advisory lock (a failed
  ``pg_try_advisory_lock`` leaves no lock behind), a session was blocked before or after
  it, or it did not end normally.

The footprints are a run's: two steps commute or not in the run where they were read,
and the pinned explorer keeps, for each run, only the pairs of steps that did not
commute there (lab/pinned/reduce.py says why every order reached by swapping the
others ends as the run did). A step that commutes in one order may not in another (it
waits beside a blocked session in some orders only); nothing carries over between runs.

What no lock shows stays unseen: a statement outside any transaction that writes
nothing (a plain read before a ``BEGIN`` or after a ``COMMIT`` in the same step) leaves
no trace. It reads only what commits made visible, and commits commute with nothing,
so it commutes as its step does, unless it reads what MVCC does not hide: a row's
``xmax`` (another transaction's open row lock), ``pg_locks``, a sequence's value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg

from lab.pinned.interleave import Fetcher, lock_waiters

READ_MODES = frozenset({"AccessShareLock", "SIReadLock"})
ENDED = "ended its transaction"  # one that wrote


@dataclass(frozen=True)
class Footprint:
    """What one statement touched, as the server showed it (see the module doc)."""

    actor: int
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    everything: str = ""  # why it commutes with nothing ("" when it may)
    ended: bool = False  # it ended a transaction that wrote (the gate's commit rule)
    fresh: bool = False  # each of its statements read with a snapshot of its own

    def commutes_with(self, other: Footprint) -> bool:
        """Whether running the two in either order is the same (different actors, no
        object one writes and the other touches; an end of a transaction that wrote only
        beside a step whose reads took no snapshot that outlives it)."""
        if self.everything or other.everything or self.actor == other.actor:
            return False
        if (self.ended and not other.fresh) or (other.ended and not self.fresh):
            return False
        return not (self.writes & (other.reads | other.writes) or other.writes & self.reads)


@dataclass(frozen=True)
class Look:
    """One session in the server's eyes: its granted locks (object, mode), whether it
    when its transaction began and its state last changed, and the text of its last
    statement (pg_stat_activity)."""

    locks: frozenset[tuple[str, str]] = frozenset()
    xact_start: str = ""
    state_change: str = ""
    query: str = ""
    xid: str = ""  # the transaction's id ("" while it has written nothing)
    next_xid: str = ""  # the next id the server gives out ("" when not read)


def footprint(
    actor: int,
    before: Look,
    after: Look,
    status: tuple[str, str],
    everything: str = "",
    fresh: bool = False,
) -> Footprint:
    """The footprint of a statement from its session's look before and after it and its
    ReadyForQuery status bytes (before, after); `everything`: a reason found already.
    `fresh`: the caller vouches that the step read with snapshots of its own and ran
    nothing its locks do not show (lab/gate/commits.py); then the end of a transaction
    that wrote is `ended`, with the locks it let go of, instead of commuting with nothing."""
    everything = everything or _unseen(before, after, status)
    ended = fresh and everything == ENDED and not _serializable(before)
    if everything and not ended:
        return Footprint(actor, everything=everything)
    if status == ("I", "I"):  # nothing ran on the session
        return Footprint(actor, fresh=fresh)
    held = before.locks | after.locks
    reads = frozenset(obj for obj, mode in held if mode in READ_MODES)
    writes = frozenset(obj for obj, mode in held if mode not in READ_MODES)
    return Footprint(actor, reads - writes, writes, ended=ended, fresh=fresh)


# What a session holds (the transaction's own ids are left out: every transaction has
# them), and what pg_stat_activity says of it.
LOCKS = """
SELECT CASE WHEN relation IS NOT NULL THEN 'relation:' || relation
            ELSE locktype || ':' || classid || '.' || objid || '.' || objsubid END,
       mode
FROM pg_locks
WHERE pid = $1 AND granted AND locktype NOT IN ('virtualxid', 'transactionid')
"""
ACTIVITY = """
SELECT coalesce(xact_start::text, ''),
       coalesce(state_change::text, ''), coalesce(query, ''), coalesce(backend_xid::text, ''),
       txid_snapshot_xmax(txid_current_snapshot())::text
FROM pg_stat_activity WHERE pid = $1
"""


async def look(db: Fetcher, pid: int) -> Look:
    """What the server shows backend `pid` holding now."""
    rows = await db.fetch(LOCKS, pid)
    activity = await db.fetch(ACTIVITY, pid)
    if not activity:  # the backend is gone
        return Look(frozenset((r[0], r[1]) for r in rows))
    locks = frozenset((r[0], r[1]) for r in rows)
    return Look(locks, *activity[0])


def _unseen(before: Look, after: Look, status: tuple[str, str]) -> str:
    """Why the server cannot show what a step touched ("" when it can)."""
    if status == ("I", "I"):
        return "" if after.state_change == before.state_change else "ran outside a transaction"
    if status == ("I", "T") and not _same_next(before, after):
        return "ran outside a transaction and began one"
    if status[1] == "I":
        return "" if _wrote_nothing(before, after) else ENDED
    if status == ("T", "T") and before.xact_start != after.xact_start:
        return "ended its transaction and began another"
    return ""


def _wrote_nothing(before: Look, after: Look) -> bool:
    """Whether a transaction that just ended had no id, none was given out while it ended,
    and it held no serializable read (see the module doc)."""
    return not before.xid and _same_next(before, after) and not _serializable(before)


def _serializable(look: Look) -> bool:
    """Whether the session held a serializable read (its end moves what no lock shows)."""
    return any(mode == "SIReadLock" for _, mode in look.locks)


def _same_next(before: Look, after: Look) -> bool:
    """Whether no transaction that got an id ended during the step: the next id a fresh
    snapshot shows (``txid_snapshot_xmax``) did not move. An id given out and still in
    use (the session's own open transaction's) does not move it."""
    return before.next_xid != "" and before.next_xid == after.next_xid


class StepPrints:
    """A Sequencer Watch (lab/pinned/rules.py) that reads each granted step's footprint:
    `prints[k]` for schedule item k. Items never granted (skipped, a fault) have none."""

    def __init__(self, db: Fetcher, sessions: Mapping[str, asyncpg.Connection]) -> None:
        self.db = db
        self.conns = dict(sessions)
        self.actor = {name: i for i, name in enumerate(sessions)}
        self.pids = {name: conn.get_server_pid() for name, conn in sessions.items()}
        self.prints: dict[int, Footprint] = {}
        self._before: tuple[Look, str, bool] = (Look(), "I", False)

    def _status(self, session: str) -> str:
        return "T" if self.conns[session].is_in_transaction() else "I"

    async def _blocked(self) -> bool:
        return bool(await lock_waiters(self.db, list(self.pids.values())))

    async def due(self, k: int, session: str) -> None:
        before = await look(self.db, self.pids[session])
        self._before = (before, self._status(session), await self._blocked())

    async def granted(self, k: int, session: str) -> None:
        before, status, blocked = self._before
        after = await look(self.db, self.pids[session])
        why = ""
        if blocked or await self._blocked():
            why = "a session was blocked before or after it"
        elif "advisory" in after.query.lower():
            why = "it names an advisory lock"
        status_after = self._status(session)
        self.prints[k] = footprint(self.actor[session], before, after, (status, status_after), why)

    async def ended(self) -> None:
        return None
