"""A transfer with psycopg 3, as its users write it: debit the source account, credit the
target, commit (psycopg opens the transaction itself). Two transfers between the same two
accounts in opposite directions each lock one row and wait for the other's: PostgreSQL
picks one as the deadlock victim (40P01) and that transfer fails.

    DATABASE_URL=postgresql://... python deadlock_psycopg.py [--sorted] SOURCE TARGET [AMOUNT]

--sorted updates the two rows in id order, whichever way the money goes: the second
transfer waits for the first one's commit and neither fails.
"""

from __future__ import annotations

import argparse
import os

import psycopg


def transfer(
    conn: psycopg.Connection, source: int, target: int, amount: int, ordered: bool
) -> None:
    """Move `amount` from `source` to `target`, in the connection's transaction."""
    moves = [(source, -amount), (target, amount)]
    if ordered:
        moves.sort()
    for account_id, delta in moves:
        conn.execute(
            "UPDATE accounts SET balance = balance + %s WHERE id = %s", (delta, account_id)
        )


def main(
    dsn: str, source: int = 1, target: int = 2, amount: int = 10, ordered: bool = False
) -> None:
    """One transfer on `dsn`, committed when the block ends."""
    with psycopg.connect(dsn) as conn:
        transfer(conn, source, target, amount, ordered)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sorted", action="store_true", help="update the rows in id order")
    parser.add_argument("source", type=int)
    parser.add_argument("target", type=int)
    parser.add_argument("amount", type=int, nargs="?", default=10)
    args = parser.parse_args()
    main(os.environ["DATABASE_URL"], args.source, args.target, args.amount, args.sorted)
