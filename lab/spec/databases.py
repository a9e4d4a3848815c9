"""The one place the spec runners make and drop databases (trace, explore, suite)."""

from __future__ import annotations

from lab.errors import LabError
from lab.spec.wire import PgConn


class Databases:
    """The databases specs run on (a trace's, an explore's, a suite's lanes'), each made
    here and dropped in `close` (WITH (FORCE): the sessions of a stopped spec go too)."""

    def __init__(self, dsn: str) -> None:
        self.dsn, self.made = dsn, list[str]()
        self.admin = PgConn(dsn)

    def make(self, name: str, *, replace: bool = False) -> str:
        """A new database; `replace`: drop one of that name first, as pg_regress does with
        its own database (not WITH (FORCE): one in use is an error)."""
        steps = ([f'DROP DATABASE IF EXISTS "{name}"'] if replace else []) + [
            f'CREATE DATABASE "{name}"'
        ]
        for sql in steps:
            res = self.admin.execute(sql)
            if res is None or res.kind == "error":
                text = res.message().strip() if res is not None else "no answer"
                raise LabError(f"cannot create database {name}: {text}")
        self.made.append(name)
        return name

    def remake(self, name: str) -> None:
        """The database again, empty: after a spec the tester gave up on (exit 1, no
        teardown), whatever its setup left must not reach the lane's next spec."""
        self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.made.remove(name)
        self.make(name)

    def close(self) -> None:
        try:
            for name in self.made:
                self.admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            self.admin.close()
