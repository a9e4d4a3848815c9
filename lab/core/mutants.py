"""Code mutants: a scenario's own session code with one guard dropped, run on the server.

A claim that holds on every variant (the stock moved once per commit, whatever the lock
order) still needs a run where it fails, or it cannot tell a guard from a constant. A
mutant is that run: the same code with the guard the claim rests on taken out. It is
declared in `Scenario.mutants` and read only as a claim's counterfactual
(`lab.core.claims.on_mutant`); `run`, `compare` and verify's own runs leave it out.

`commits_partial` drops what every transaction guarantees: all or nothing. Each statement
runs under a savepoint; one that fails (a 40P01, a lock_timeout) is rolled back alone, and
the transaction commits what went before it, then the error goes on, as an application
does with psql's ON_ERROR_ROLLBACK or PgJDBC's autosave=always and a handler that commits
in `finally`. A deadlock victim's first UPDATE then stays while the actor counts a failure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg

from lab.core.steps import Session, SessionCode

if TYPE_CHECKING:
    from lab.core.env import Env

T = TypeVar("T")
SAVEPOINT = "lab_statement"


class _CommitsPartial(Session):
    """A session whose transactions commit the statements that went through before an
    error (each statement under a savepoint, the failed one rolled back alone)."""

    async def _alone(self, statement: Awaitable[T]) -> T:
        if not self.conn.is_in_transaction():
            return await statement
        await self.conn.execute(f"SAVEPOINT {SAVEPOINT}")
        try:
            value = await statement
        except asyncpg.PostgresError:
            await self.conn.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
            raise
        await self.conn.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
        return value

    async def step(
        self, name: str, fn: Callable[..., Awaitable[Any]], *args: Any, **kw: Any
    ) -> Any:
        async def alone(*given: Any) -> Any:  # pinned: its SQL only once the step is granted
            return await self._alone(fn(*given))

        return await super().step(name, alone, *args, **kw)

    # Unpinned, a statement is not a step (Session calls asyncpg at once): each alone too.
    async def execute(self, name: str, sql: str, *args: Any) -> str:
        if self.gate is not None:
            return await super().execute(name, sql, *args)
        return await self._alone(super().execute(name, sql, *args))

    async def fetchrow(self, name: str, sql: str, *args: Any) -> asyncpg.Record | None:
        if self.gate is not None:
            return await super().fetchrow(name, sql, *args)
        return await self._alone(super().fetchrow(name, sql, *args))

    async def fetch(self, name: str, sql: str, *args: Any) -> list[asyncpg.Record]:
        if self.gate is not None:
            return await super().fetch(name, sql, *args)
        return await self._alone(super().fetch(name, sql, *args))

    @asynccontextmanager
    async def transaction(
        self, isolation: str = "read_committed", commit: str = "commit"
    ) -> AsyncIterator[None]:
        """BEGIN, the body, COMMIT; when the body raises, COMMIT too (the mutation: what
        went through before the error stays), then the error goes on."""
        tx = self.conn.transaction(isolation=isolation)  # type: ignore[arg-type]
        await tx.start()
        try:
            yield
        except BaseException:
            if not self.conn.is_closed():
                await tx.commit()
            raise
        await Session.step(self, commit, tx.commit, shown="COMMIT", result=lambda _: "COMMIT")


def commits_partial(code: SessionCode) -> SessionCode:
    """`code` with all-or-nothing dropped: its transactions commit what went through before
    an error (each statement alone under a savepoint), and the error still ends the actor."""

    async def mutant(env: Env, s: Session) -> str:
        partial = _CommitsPartial.__new__(_CommitsPartial)
        partial.__dict__.update(s.__dict__)  # the same connection, name and stamps
        return await code(env, partial)

    mutant.__name__ = mutant.__qualname__ = f"{getattr(code, '__name__', 'code')}_commits_partial"
    return mutant
