"""When a commit moves: the end of a transaction that wrote, beside read committed steps.

A ``COMMIT`` (or ``ROLLBACK``) of a transaction that wrote decides what every snapshot
taken after it sees. Under READ COMMITTED each statement takes a snapshot of its own, so
a commit changes what another session's statement sees only when that statement reads
an object the committed transaction wrote, and then the statement's own locks show the
read. Under REPEATABLE READ or SERIALIZABLE the first statement fixes the snapshot for
every later one whatever it reads, so there a commit moves past nothing (the footprint
rule, lab/pinned/footprint.py). The gate lets a commit that wrote move past another
actor's step, by the locks each let go of or held, when all of this holds:

* The ending step is one statement, ``COMMIT``/``END``/``ROLLBACK``/``ABORT``: no
  statement ran in it whose locks were taken and let go of before anyone looked.
* The other step ran inside one transaction that was open after it (or began it with
  ``BEGIN``), so its locks are still there to read, and undid no savepoint (``ROLLBACK
  TO`` lets go of the locks taken since) and declared no cursor (its snapshot outlives
  the statement), or it is such a single ending statement.
* Both sessions read committed: neither named an isolation level (``BEGIN ISOLATION
  LEVEL``, ``SET TRANSACTION``, ``default_transaction_isolation`` in a statement or in
  the startup packet's options), nor sent ``NOTIFY`` (delivered at commit, to whoever
  listens by then) or a two-phase commit.
* The database cannot change that behind the statements' backs: its default isolation
  is read committed, no role or database setting names one, no constraint or trigger is
  deferred to the commit (it would read at commit time what no lock showed), and no
  function of its own commits, notifies, sets the isolation or catches an exception (a
  caught exception undoes a subtransaction and lets go of its locks).

A serializable transaction's end (``SIReadLock`` held) never moves. What is left of the
footprint rule's blind spots (a row's ``xmax`` read by ``SKIP LOCKED``, ``pg_locks``
read as a table, a sequence's value) is the same with or without this rule.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import asyncpg

from lab.gate.proxy import Group, Session
from lab.gate.wire import Statement

NAMED = re.compile(
    r"isolation|notify|prepare\s+transaction|(?:commit|rollback)\s+prepared", re.IGNORECASE
)
SHOWS = re.compile(r"\s*SHOW\s", re.IGNORECASE)
ENDING = re.compile(
    r"\s*(?:COMMIT|END|ROLLBACK|ABORT)(?:\s+(?:WORK|TRANSACTION))?\s*(?:;\s*)?$", re.IGNORECASE
)
BEGINNING = re.compile(r"\s*(?:BEGIN|START\s+TRANSACTION)\b", re.IGNORECASE)
# Undoes a savepoint (and lets go of its locks), or holds a snapshot past the statement.
UNDOES = re.compile(r"ROLLBACK\s+TO|\bDECLARE\b", re.IGNORECASE)

# Why the database rules the commit rule out ("" when it does not), read on the order's
# own database after its setup ran.
DATABASE = r"""
SELECT CASE
  WHEN current_setting('default_transaction_isolation') <> 'read committed'
    THEN 'its default isolation is ' || current_setting('default_transaction_isolation')
  WHEN EXISTS (SELECT 1 FROM pg_db_role_setting
               WHERE array_to_string(setconfig, ' ') ~* 'isolation')
    THEN 'a role or database setting names an isolation level'
  WHEN EXISTS (SELECT 1 FROM pg_constraint WHERE condeferrable)
    OR EXISTS (SELECT 1 FROM pg_trigger WHERE tgdeferrable)
    THEN 'a constraint or trigger may be deferred to the commit'
  WHEN EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
                 AND p.prosrc ~* 'isolation|notify|exception|commit|rollback|transaction')
    THEN 'a function of its own commits, notifies, sets the isolation or catches errors'
  ELSE '' END
"""


async def ruled_out(observer: asyncpg.Connection) -> str:
    """Why the database rules the commit rule out ("" when it does not)."""
    why: str = await observer.fetchval(DATABASE)
    return why


def names_isolation(statements: Sequence[Statement]) -> bool:
    """Whether the statements name an isolation level, a NOTIFY or a two-phase commit:
    from then on their session's steps do not read committed for the rule (a SHOW only
    reads the setting)."""
    return any(NAMED.search(s.sql) and not SHOWS.match(s.sql) for s in statements)


def starts_named(session: Session) -> bool:
    """Whether the session's startup packet names one (its options, or a setting of its
    own as asyncpg's server_settings send): read once, when it logs in."""
    startup = " ".join(f"{key}={value}" for key, value in session.parameters.items())
    return bool(NAMED.search(startup))


def ends_alone(group: Group) -> bool:
    """Whether the group is one statement that ends the transaction, nothing else."""
    return len(group.statements) == 1 and bool(ENDING.match(group.statements[0].sql))


def fresh(group: Group, status: tuple[str, str]) -> bool:
    """Whether a step's locks show all it read (ReadyForQuery's status before and after
    it): it ran in a transaction open after it, begun before it or by its first
    statement, and undid no savepoint; or it is an ending statement alone."""
    if ends_alone(group):
        return True
    if any(UNDOES.search(s.sql) for s in group.statements):
        return False
    if status == ("I", "I"):  # nothing ran (the footprint rule checks that)
        return True
    begun = status[0] != "I" or bool(BEGINNING.match(group.statements[0].sql))
    return begun and status[1] != "I"
