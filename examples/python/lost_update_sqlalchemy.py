"""A deposit with the SQLAlchemy 2 ORM (psycopg 3 underneath), as its users write it:
load the Account, add to its balance attribute, commit. The Session's transaction reads
under READ COMMITTED, so two at once can both load 100 and both flush 110: one deposit
is lost.

    DATABASE_URL=postgresql://... python lost_update_sqlalchemy.py [--locked] [AMOUNT]

--locked loads the row with .with_for_update() (SELECT ... FOR UPDATE): the second
deposit waits at its load for the first one's commit and loads the new balance.
"""

from __future__ import annotations

import argparse
import os

from sqlalchemy import create_engine, make_url, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column


class Base(DeclarativeBase):
    pass


class Account(Base):
    __tablename__ = "accounts"

    id: Mapped[int] = mapped_column(primary_key=True)
    balance: Mapped[int]


def deposit(session: Session, account_id: int, amount: int, locked: bool) -> None:
    """Add `amount` to the account's balance and commit."""
    query = select(Account).where(Account.id == account_id)
    if locked:
        query = query.with_for_update()
    account = session.scalars(query).one()
    account.balance += amount
    session.commit()


def main(dsn: str, amount: int = 10, locked: bool = False) -> None:
    """One deposit to account 1 on `dsn` (a postgresql:// URL, run with psycopg 3)."""
    engine = create_engine(make_url(dsn).set(drivername="postgresql+psycopg"))
    try:
        with Session(engine) as session:
            deposit(session, 1, amount, locked)
    finally:
        engine.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locked", action="store_true", help="load with .with_for_update()")
    parser.add_argument("amount", type=int, nargs="?", default=10)
    args = parser.parse_args()
    main(os.environ["DATABASE_URL"], args.amount, args.locked)
