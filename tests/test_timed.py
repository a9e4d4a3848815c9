"""How a timed story ends (lab.pinned.timed.end_all, raised), without a server."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from lab.pinned.timed import ProcessActor, end_all, raised


class _Closed:
    """Stands for a worker process and a connection: records that it was ended."""

    def __init__(self) -> None:
        self.ended = False

    async def close(self) -> None:
        self.ended = True

    def terminate(self) -> None:
        self.ended = True


async def _fail() -> None:
    raise ValueError("the worker's failure")


async def test_a_story_ends_its_tasks_processes_and_connections() -> None:
    """end_all cancels a task still waiting, keeps a failed task's exception retrievable
    by raised() without raising it, closes the processes and terminates the connections."""
    waiting = asyncio.create_task(asyncio.sleep(60))
    failed = asyncio.create_task(_fail())
    await asyncio.sleep(0)
    assert isinstance(raised([waiting, failed]), ValueError)
    proc, conn = _Closed(), _Closed()
    await end_all([waiting, failed], [cast(ProcessActor, proc)], [cast(Any, conn)])
    assert waiting.cancelled() and proc.ended and conn.ended
    ok = asyncio.create_task(asyncio.sleep(0))
    await ok
    assert raised([ok]) is None
