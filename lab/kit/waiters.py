"""Waiters as data: a poll loop written as a generator that yields what it waits
for (`Command`, `Sleep`, `Call`) instead of awaiting it. The generator reads like the
coroutine it replaces (`yield` where the coroutine said `await`), but resuming it costs a
`send()`: no future, no task step, no event-loop handle per command. Its commands go into
the same one-write-per-tick pipeline, its sleeps onto one timer heap, and `Call` runs a
generator as a call of its own, as each call of a JavaScript async function is its own
promise: a recursive poll (the document's) does not walk a chain of awaiting frames on
every resume, and does not overflow the stack. `drive()` runs the same generators on
any redis-py-like client (the pooled one), one await per command.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from lab.kit.autopipe import PACKED_CACHE, AutoPipeline, ReplyError, is_ok, pack, set_wire

T = TypeVar("T")


_commands: dict[tuple[Any, ...], Command] = {}


class Command:
    """One Redis command a waiter waits for: `value = yield Command.get(key)`. The reply
    is what redis-py's method of the same name returns (SET: True or None)."""

    __slots__ = ("args", "convert", "kwargs", "method", "packed")

    def __init__(
        self,
        method: str,
        wire: tuple[Any, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None = None,
        convert: Callable[[Any], Any] | None = None,
    ) -> None:
        self.method, self.args, self.kwargs = method, args, kwargs or {}
        self.packed = pack(wire)
        self.convert = convert

    @classmethod
    def _made(cls, key: tuple[Any, ...], make: Callable[[], Command]) -> Command:
        """Commands are values: 5,000 pollers send the same GET and SET NX again and again,
        so each distinct one is built (and packed) once."""
        try:
            return _commands[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable argument: build it, keep nothing
            return make()
        if len(_commands) >= PACKED_CACHE:
            _commands.clear()
        made = _commands[key] = make()
        return made

    @classmethod
    def get(cls, name: str) -> Command:
        made = _commands.get(("GET", name))  # the pollers' hot path: no closure made
        return made or cls._made(("GET", name), lambda: cls("get", ("GET", name), (name,)))

    @classmethod
    def set(
        cls,
        name: str,
        value: Any,
        *,
        ex: int | None = None,
        px: int | None = None,
        nx: bool = False,
    ) -> Command:
        def make() -> Command:
            kwargs = {"ex": ex, "px": px, "nx": nx}
            return cls("set", set_wire(name, value, ex, px, nx), (name, value), kwargs, is_ok)

        return cls._made(("SET", name, value, ex, px, nx), make)

    @classmethod
    def delete(cls, *names: str) -> Command:
        return cls("delete", ("DEL", *names), names)

    @classmethod
    def eval(cls, script: str, numkeys: int, *keys_and_args: Any) -> Command:
        wire = ("EVAL", script, numkeys, *keys_and_args)
        return cls("eval", wire, (script, numkeys, *keys_and_args))


class Sleep:
    """`yield Sleep(seconds)`: the waiter's own timer."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


Waiter = Generator["Command | Sleep | Call", Any, T]  # what a waiter function returns


class Call:
    """`value = yield Call(other(...))`: run another waiter as a call of its own and get
    what it returns (or raises); its frames do not sit under this one's."""

    __slots__ = ("gen",)

    def __init__(self, gen: Waiter[Any]) -> None:
        self.gen = gen


class _Waiter:
    """One running waiter: its stack of calls and the future its caller awaits. To the
    connection it answers like a future (done / set_result / set_exception)."""

    __slots__ = ("convert", "engine", "future", "stack")

    def __init__(self, gen: Waiter[Any], future: asyncio.Future[Any], engine: Waiters) -> None:
        self.stack = [gen]
        self.future = future
        self.convert: Callable[[Any], Any] | None = None
        self.engine = engine

    def done(self) -> bool:  # cancelled by its caller: replies are read and dropped
        return self.future.done()

    def set_result(self, reply: Any) -> None:
        convert, self.convert = self.convert, None
        self.engine.step(self, convert(reply) if convert else reply)

    def set_exception(self, exc: BaseException) -> None:
        self.convert = None
        self.engine.step(self, None, exc)


class Done:
    """What `advance` gives when the outermost call returned: its value."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def advance(stack: list[Waiter[Any]], value: Any, exc: BaseException | None) -> Any:
    """Resume a waiter's innermost call with `value` (or throw `exc` into it), following
    its `Call`s and returns, until it waits: the `Command` or `Sleep` it yielded, or `Done`
    when the outermost call returned. What the outermost call raises is raised here."""
    while True:
        try:
            op = stack[-1].throw(exc) if exc is not None else stack[-1].send(value)
        except StopIteration as stop:
            stack.pop()
            value, exc = stop.value, None
            if not stack:
                return Done(value)
            continue
        except Exception as error:  # the call raised: its caller gets it
            stack.pop()
            if not stack:
                raise
            value, exc = None, error
            continue
        value, exc = None, None
        if isinstance(op, Call):
            stack.append(op.gen)
        elif isinstance(op, (Command, Sleep)):
            return op
        else:
            exc = TypeError(f"a waiter yielded {op!r}: expected Command, Sleep or Call")


class Waiters:
    """Runs generator waiters: their commands in the pipeline's one write per tick, their
    sleeps on one timer heap, each resumed with `send()`."""

    def __init__(self, pipe: AutoPipeline) -> None:
        self._pipe = pipe  # whose connections and one write per tick the waiters share
        self._timers: list[tuple[float, int, _Waiter]] = []
        self._seq = 0
        self._handle: asyncio.TimerHandle | None = None

    def run(self, gen: Waiter[T]) -> asyncio.Future[T]:
        """Start `gen` now; the future of what it returns (or raises). Cancelling the
        future abandons the waiter (its pending replies are dropped, its timer ignored)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.step(_Waiter(gen, future, self), None)
        return future

    def step(self, w: _Waiter, value: Any, exc: BaseException | None = None) -> None:
        """Resume `w` with `value` (or `exc`) until it waits for a command or a timer."""
        if w.future.done():
            return
        try:
            op = advance(w.stack, value, exc)
        except Exception as error:
            w.future.set_exception(error)
            return
        if isinstance(op, Done):
            w.future.set_result(op.value)
        elif isinstance(op, Command):
            w.convert = op.convert
            self._pipe.enqueue(op.packed, w)
        else:  # a Sleep
            self._seq += 1
            heapq.heappush(self._timers, (time.perf_counter() + op.seconds, self._seq, w))
            if self._timers[0][2] is w:  # the earliest now: the tick comes for it
                self._arm()

    def _arm(self) -> None:
        """One loop timer, for the earliest sleep. The dues are on the real clock: uvloop's
        timers have 1 ms grain and a cached time, and a sleep must never end early."""
        if self._handle is not None:
            self._handle.cancel()
        left = self._timers[0][0] - time.perf_counter()
        self._handle = asyncio.get_running_loop().call_later(max(left, 0.0), self._tick)

    def _tick(self) -> None:
        self._handle = None
        timers = self._timers
        now = time.perf_counter()
        while timers and timers[0][0] <= now:
            _, _, w = heapq.heappop(timers)
            self.step(w, None)
            now = time.perf_counter()
        if timers and self._handle is None:
            self._arm()


async def drive(gen: Waiter[T], client: Any) -> T:
    """Run a waiter on `client` (redis-py's asyncio client, or anything with its method
    names): one await per command, asyncio's sleep for its timer; calls as in Waiters."""
    stack: list[Waiter[Any]] = [gen]
    value: Any = None
    exc: BaseException | None = None
    while not isinstance(op := advance(stack, value, exc), Done):
        value, exc = None, None
        try:
            if isinstance(op, Command):
                value = await getattr(client, op.method)(*op.args, **op.kwargs)
                value = op.convert(value) if op.convert else value
            else:
                await asyncio.sleep(op.seconds)
        except ResponseError as error:  # an error reply: the pipelined client's class
            exc = error if isinstance(error, ReplyError) else ReplyError(str(error))
        except Exception as error:  # the command failed: thrown into the waiter
            exc = error
    result: T = op.value
    return result
