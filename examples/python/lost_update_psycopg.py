"""A deposit with psycopg 3, as its users write it: read the balance, add in Python,
write the sum, commit (psycopg opens the transaction itself). Two at once under READ
COMMITTED can both read 100 and both write 110: one deposit is lost.

    DATABASE_URL=postgresql://... python lost_update_psycopg.py [--locked] [AMOUNT]

--locked reads with SELECT ... FOR UPDATE: the second deposit waits at its read for the
first one's commit and reads the new balance.
"""

from __future__ import annotations

import argparse
import os

import psycopg


def deposit(conn: psycopg.Connection, account_id: int, amount: int, locked: bool) -> None:
    """Add `amount` to the account's balance, in the connection's transaction."""
    query = "SELECT balance FROM accounts WHERE id = %s"
    if locked:
        query += " FOR UPDATE"
    row = conn.execute(query, (account_id,)).fetchone()
    assert row is not None, f"no account {account_id}"
    conn.execute("UPDATE accounts SET balance = %s WHERE id = %s", (row[0] + amount, account_id))


def main(dsn: str, amount: int = 10, locked: bool = False) -> None:
    """One deposit to account 1 on `dsn`, committed when the block ends."""
    with psycopg.connect(dsn) as conn:
        deposit(conn, 1, amount, locked)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locked", action="store_true", help="read with SELECT ... FOR UPDATE")
    parser.add_argument("amount", type=int, nargs="?", default=10)
    args = parser.parse_args()
    main(os.environ["DATABASE_URL"], args.amount, args.locked)
