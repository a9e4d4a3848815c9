"""Bounded waits that never lose a cancellation.

Python 3.11's ``asyncio.wait_for`` returns the inner result when the waiting task is
cancelled in the same loop iteration as the inner awaitable finishes, and the
cancellation is lost (CPython gh-86296, fixed in 3.12). A watcher cancelled at that
moment keeps running and whoever gathers it waits forever: that is how a test run and
a published verify once hung in an idle event loop. ``within`` runs the awaitable in
the caller's own task under ``asyncio.timeout``, so an outside cancel always lands.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


async def within(aw: Awaitable[T], seconds: float | None) -> T:
    """``await aw``, or TimeoutError after ``seconds`` (None: no limit). A task passed
    in is cancelled when the limit hits, like ``asyncio.wait_for``."""
    if seconds is None:
        return await aw
    fut = asyncio.ensure_future(aw) if not asyncio.iscoroutine(aw) else None
    try:
        async with asyncio.timeout(max(seconds, 0.0)):
            return await (fut if fut is not None else aw)
    except TimeoutError:
        if fut is not None and not fut.done():
            fut.cancel()
        raise


@overload
async def until(
    check: Callable[[], Awaitable[T]], seconds: float, what: str, *, every: float = ...
) -> T: ...
@overload
async def until(check: Callable[[], T], seconds: float, what: str, *, every: float = ...) -> T: ...
async def until(
    check: Callable[[], Any], seconds: float, what: str, *, every: float = 0.005
) -> Any:
    """Poll ``check()`` (sync or async) until it returns something truthy, and return it;
    after ``seconds`` raise ScenarioFailure naming ``what`` and the last value seen. The
    one bounded wait scenarios use instead of writing their own loop: it never gives up
    silently and it never decides an order by sleeping (it waits for what it checks)."""
    from lab.errors import ScenarioFailure

    deadline = time.monotonic() + seconds
    while True:
        got = check()
        value = await got if inspect.isawaitable(got) else got
        if value:
            return value
        if time.monotonic() >= deadline:
            raise ScenarioFailure(f"{what}: not within {seconds:g} s (last seen: {value!r})")
        await asyncio.sleep(every)
