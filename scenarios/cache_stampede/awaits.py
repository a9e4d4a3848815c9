"""What cache_stampede.py's async functions await, so that 5,000 waiters poll fast enough.

Both variants are `async def` functions that await Redis and their sleeps through three
helpers: `await redis(command)`, `await sleep(seconds)`, `await call(coroutine)`. `run`
hands such a function to the waiter engine (lab/kit/waiters.py, through `env.do`), which
resumes it with `send()` instead of a future, an event-loop handle and a task step per
command: one write per tick for every waiter's command, one timer heap for their sleeps.
That is what keeps the buggy poll at the document's ~100k GET/s (docs/load.md, "Waiters
as data"). `call` runs the document's recursive poll as a call of its own, as each call
of a JavaScript async function is its own promise: no chain of awaiting frames to walk on
every resume, and no stack to overflow. Inside these functions await only these helpers
(or another such function); asyncio's own futures belong to the code that calls `run`.
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar, cast

from lab.core.scenario import Env
from lab.kit.waiters import Call, Command, Sleep, Waiter

T = TypeVar("T")


@types.coroutine
def redis(command: Command) -> Generator[Command, Any, Any]:
    """`reply = await redis(Command.get(key))`: the reply redis-py's method would give."""
    reply = yield command
    return reply


@types.coroutine
def sleep(seconds: float) -> Generator[Sleep, Any, None]:
    """`await sleep(seconds)`: on the engine's timer heap (never ends early)."""
    yield Sleep(seconds)


@types.coroutine
def call(coroutine: Coroutine[Any, Any, T]) -> Generator[Call, Any, T]:
    """`await call(f(...))`: `f` runs as a call of its own (its frames not under ours)."""
    result: T = yield Call(_waiter(coroutine))
    return result


def run(env: Env, coroutine: Coroutine[Any, Any, T]) -> Awaitable[T]:
    """Run one such function on the actors' Redis (env.do): its result, or its error."""
    done: Awaitable[T] = env.do(_waiter(coroutine))
    return done


def _waiter(coroutine: Coroutine[Any, Any, T]) -> Waiter[T]:
    """The engine resumes a coroutine as it does a generator (send/throw, StopIteration)."""
    return cast("Waiter[T]", coroutine)
