"""Get-or-create with psycopg 3, as its users write it: SELECT the tag by name, INSERT it
when there is none, commit. Two at once both find none and both insert: the second INSERT
waits on the first one's uncommitted row in the UNIQUE index, and when the first commits
it fails with a unique violation (23505) where the caller wanted the tag's id.

    DATABASE_URL=postgresql://... python upsert_psycopg.py [--on-conflict] NAME

--on-conflict inserts with ON CONFLICT (name) DO NOTHING and reads the row again when
the insert made none: the second caller gets the first one's id.
"""

from __future__ import annotations

import argparse
import os

import psycopg


def get_or_create(conn: psycopg.Connection, name: str, on_conflict: bool) -> int:
    """The id of the tag `name`, inserted if there was none, in the connection's transaction."""
    found = conn.execute("SELECT id FROM tags WHERE name = %s", (name,)).fetchone()
    if found is not None:
        return int(found[0])
    insert = "INSERT INTO tags (name) VALUES (%s)"
    if on_conflict:
        insert += " ON CONFLICT (name) DO NOTHING"
    made = conn.execute(insert + " RETURNING id", (name,)).fetchone()
    if made is None:  # --on-conflict: another caller's row won; read it
        made = conn.execute("SELECT id FROM tags WHERE name = %s", (name,)).fetchone()
    assert made is not None
    return int(made[0])


def main(dsn: str, name: str = "postgres", on_conflict: bool = False) -> int:
    """The tag's id on `dsn`, committed when the block ends."""
    with psycopg.connect(dsn) as conn:
        return get_or_create(conn, name, on_conflict)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--on-conflict", action="store_true", help="INSERT ... ON CONFLICT DO NOTHING"
    )
    parser.add_argument("name", nargs="?", default="postgres")
    args = parser.parse_args()
    main(os.environ["DATABASE_URL"], args.name, args.on_conflict)
