"""A gate inside one statement: each row an UPDATE has locked waits before it is changed.

A schedule stops sessions between statements; the order in which one UPDATE locks its
rows is inside the statement. `trigger(table, key)` makes every row change on `table` by
a session whose `lab.gate` setting is N wait on the shared advisory lock (key, N), after
the row is locked and before it is changed. The pinned session `gate` (`session`) holds
the exclusive lock of every gated session in one transaction (its step `close`); its step
`open-sN` reads which rows are still free, then lets sN go. Nothing is held once the gate
session's transaction ends, however the run ended. Under a load no gate session runs, so
no lock is held and the trigger only takes a free shared lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lab.core.steps import Session, show_sql

STEPS = ("close", "open-s1", "open-s2")  # the gate session's steps, for Pinned.steps
SESSIONS = (1, 2)  # the gated sessions' numbers: s1 and s2


def trigger(table: str, key: int) -> str:
    """The DDL (for a schema): BEFORE UPDATE, so the rows' INSERT does not fire it."""
    return (
        "CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM "
        f"pg_advisory_xact_lock_shared({key}, current_setting('lab.gate')::int); RETURN NEW; "
        f"END $$; CREATE TRIGGER gate BEFORE UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION gate()"
    )


def setting(n: int) -> str:
    """The statement that puts a session's row changes behind gate N (inside its transaction)."""
    return f"SET LOCAL lab.gate = {n}"


def _ids(rows: Sequence[Any]) -> str:
    return ", ".join(str(r[0]) for r in rows)


async def session(s: Session, key: int, free: str, args: Sequence[Any]) -> str:
    """The gate session's code: `close` holds every gated session's lock, then each
    `open-sN` runs `free` (the rows no one has locked yet, FOR UPDATE SKIP LOCKED) and
    lets sN go. All in one transaction, so an ended run leaves no lock behind."""
    close = "; ".join(
        f"SAVEPOINT gate_s{k}; SELECT pg_advisory_xact_lock({key}, {k})" for k in SESSIONS[::-1]
    )
    try:
        await s.execute("close", "BEGIN; " + close)
        for k in SESSIONS:

            async def open_(k: int = k) -> str:
                await s.conn.execute("SAVEPOINT probe")  # inside gate_sN: let go with it
                rows = await s.conn.fetch(free, *args)
                await s.conn.execute(f"ROLLBACK TO SAVEPOINT gate_s{k}")
                return f"free {_ids(rows) or 'none'}; open"

            shown = f"SAVEPOINT probe; {show_sql(free, args)}; ROLLBACK TO SAVEPOINT gate_s{k}"
            await s.step(f"open-s{k}", open_, shown=shown)
    finally:
        if not s.conn.is_closed() and s.conn.is_in_transaction():
            await s.conn.execute("ROLLBACK")
    return "opened"
