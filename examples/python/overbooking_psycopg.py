"""A booking with psycopg 3, as its users write it: read the room's capacity, count the
bookings already taken, insert one if there is room, commit. Two at once under READ
COMMITTED both count 0 (neither sees the other's uncommitted row: a phantom) and both
insert: a room for one is booked twice.

    DATABASE_URL=postgresql://... python overbooking_psycopg.py [--locked] GUEST

--locked reads the room FOR UPDATE: the second booking waits at that read for the first
one's commit, then counts its row and is refused.
"""

from __future__ import annotations

import argparse
import os

import psycopg

ROOM, DAY = 1, "2026-12-24"


def book(conn: psycopg.Connection, room_id: int, day: str, guest: str, locked: bool) -> int | None:
    """The new booking's id, or None when the room is full that day."""
    query = "SELECT capacity FROM rooms WHERE id = %s"
    if locked:
        query += " FOR UPDATE"
    room = conn.execute(query, (room_id,)).fetchone()
    assert room is not None, f"no room {room_id}"
    taken = conn.execute(
        "SELECT count(*) FROM bookings WHERE room_id = %s AND day = %s", (room_id, day)
    ).fetchone()
    assert taken is not None
    if taken[0] >= room[0]:
        return None
    row = conn.execute(
        "INSERT INTO bookings (room_id, day, guest) VALUES (%s, %s, %s) RETURNING id",
        (room_id, day, guest),
    ).fetchone()
    assert row is not None
    return int(row[0])


def main(dsn: str, guest: str = "ann", locked: bool = False) -> int | None:
    """Book room 1 for 24 December for `guest` on `dsn`, committed when the block ends."""
    with psycopg.connect(dsn) as conn:
        return book(conn, ROOM, DAY, guest, locked)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locked", action="store_true", help="read the room FOR UPDATE")
    parser.add_argument("guest", nargs="?", default="ann")
    args = parser.parse_args()
    main(os.environ["DATABASE_URL"], args.guest, args.locked)
