"""How an actor runs: a command as a process of its own, with the gate's environment
(lab/gate/dsn.py), or a Python function in a thread (or as a coroutine) with a DSN.

Each command starts in a process group of its own, so an order that ends early stops it
as a whole; its standard error's last lines are kept for the report.
"""

from __future__ import annotations

import asyncio
import inspect
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError

IDLE_S = 30.0  # an actor that neither sends a statement nor ends for this long is stuck


# A Python function run as an actor: it gets a DSN through its own port of the gate
# (libpq's and asyncpg's form, the password in a passfile), and a Redis URL through its
# own port of the Redis gate when it takes a second argument; sync or async.
Call = Callable[..., object]


@dataclass(frozen=True)
class Actor:
    """A command (or a Python function, `call`) to run as one actor: `number` from 1, in
    the order given; `command` names it in the output."""

    number: int
    command: str
    call: Call | None = None

    @classmethod
    def of(cls, number: int, call: Call) -> Actor:
        """A function as an actor, named by its qualified name."""
        name = f"{getattr(call, '__module__', '')}.{getattr(call, '__qualname__', repr(call))}"
        return cls(number, name.lstrip("."), call)

    def argv(self) -> list[str]:
        return shlex.split(self.command)


def takes_two(call: Call) -> bool:
    """Whether a function actor takes a second argument: the Redis URL."""
    try:
        return len(inspect.signature(call).parameters) >= 2
    except (TypeError, ValueError):
        return False


async def called(
    actor: Actor, args: list[str], ended: Callable[[int, int], None], said: bytearray
) -> None:
    """Run a function actor to its end: `ended(number, status)` with 0 when it returns, 1
    when it raises (its exception as the actor's output, in `said`)."""
    assert actor.call is not None
    status = 0
    try:
        if inspect.iscoroutinefunction(actor.call):
            await actor.call(*args)
        else:
            await asyncio.to_thread(actor.call, *args)
    except Exception as exc:  # the function's own failure is its outcome
        status = 1
        said += f"{type(exc).__name__}: {exc}".encode()
    ended(actor.number, status)


async def cancel_calls(calls: Sequence[asyncio.Task[None]]) -> None:
    """Function actors left running when an order ends early are cancelled; one in a
    thread ends when its connection does (bounded)."""
    for task in calls:
        task.cancel()
    if calls:
        await asyncio.wait(calls, timeout=IDLE_S)


async def spawn(actor: Actor, env: dict[str, str], cwd: Path | None) -> asyncio.subprocess.Process:
    try:
        argv = actor.argv()
    except ValueError as exc:
        raise LabError(f"actor {actor.number}: {exc} in {actor.command!r}") from None
    if not argv:
        raise LabError(f"actor {actor.number} is an empty command")
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: stopped as a whole
        )
    except OSError as exc:
        raise LabError(f"actor {actor.number}: cannot run {argv[0]!r}: {exc.strerror}") from None


async def tail(proc: asyncio.subprocess.Process, kept: bytearray, size: int = 2000) -> None:
    """Keep the last `size` bytes of what the actor wrote on stderr."""
    assert proc.stderr is not None
    while chunk := await proc.stderr.read(1 << 14):
        kept += chunk
        del kept[:-size]
