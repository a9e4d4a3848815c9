"""How a timed story ends (lab.pinned.timed.end_all, raised), and how a KeyWatch tells an
expired lease from a deleted one."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from lab.aio import within
from lab.core.env import Env
from lab.errors import ScenarioFailure
from lab.pinned.timed import Actor, KeyWatch, ProcessActor, Step, end_all, raised, run_steps
from lab.servers import Servers


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


def _env(redis: Any = None) -> Env:
    return Env(
        scenario="watch-test",
        variant="v",
        dsn="",
        database="",
        db=None,
        redis=redis,
        prefix="watch-test:",
        params={},
        seed=1,
        n=1,
    )


def test_an_expiry_seen_through_a_slow_poll_is_an_expiry() -> None:
    """Redis's TIME decides expired vs deleted: a lease seen through a 20 ms round trip,
    gone at a poll whose TIME is past its deadline, expired (the lab's clock alone, with
    the deadline in the middle of [send + PTTL, reply + PTTL], called it deleted)."""
    watch, r = KeyWatch(_env(), "k", {"t": "A"}, ttl_ms=1000), 1e12  # Redis's clock: lab + r
    watch._see("A", 990, sent=0.0, reply=20.0, now=r + 2)  # SET ran at 2 ms, PX 1000
    watch._see(None, -2, sent=992.0, reply=998.0, now=r + 994)  # Redis expired it at 992
    (span,) = watch.spans
    assert span["how"] == "expired" and span["end_ms"] <= 998.0
    watch._see("A", 500, sent=1000.0, reply=1001.0, now=r + 1000.5)
    watch._see(None, -2, sent=1003.0, reply=1004.0, now=r + 1003.5)  # 497 ms early: a DEL
    assert watch.spans[1]["how"] == "deleted" and watch.spans[1]["end_ms"] == 1003.5


async def test_a_watch_tells_an_expired_key_from_a_deleted_one(servers: Servers) -> None:
    """On a real Redis: a token set with PX 50 and left alone expired; one deleted early
    was deleted."""
    assert servers.redis is not None
    client = aioredis.from_url(servers.redis.url)
    env = _env(client)
    key = env.key("lease")
    watch = KeyWatch(env, key, {"a": "A", "b": "B"}, ttl_ms=50)
    try:
        watch.start()
        await client.set(key, "a", px=50)
        await within(watch.gone("A").wait(), 5.0)
        await client.set(key, "b", px=60_000)
        await asyncio.sleep(0.02)  # let the watch see B's token, then delete it early
        await client.delete(key)
        await within(watch.gone("B").wait(), 5.0)
    finally:
        await watch.stop()
        await client.delete(key)
        await client.aclose()
    assert [(s["who"], s["how"]) for s in watch.spans] == [("A", "expired"), ("B", "deleted")]


class _Lanes:
    """Two actors' lanes: each step's action is recorded, and what was in progress then."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.in_progress: list[str] = []
        self.ends = {name: asyncio.Event() for name in ("a1", "a2", "b1")}

    def action(self, name: str) -> Any:
        def act() -> None:
            assert not self.in_progress, f"{name} started while {self.in_progress} ran"
            self.in_progress.append(name)
            self.ran.append(name)
            # the step ends a moment later, as an actor's event would
            asyncio.get_running_loop().call_soon(self._end, name)

        return act

    def _end(self, name: str) -> None:
        self.in_progress.remove(name)
        self.ends[name].set()


async def test_lanes_run_whichever_step_came_due_first_one_at_a_time() -> None:
    """A race in two lanes: b1 waits for an actor's second report, which comes after a1;
    a2 waits for the same report, and at that tie lane A (listed first) goes first. Never
    two steps in progress at once."""
    env = _env()
    actor = Actor(env, "X")
    lanes = _Lanes()
    twice = ("X to report twice", actor.reached("tick", 2))
    steps = [
        Step(0, "a1", lanes.action("a1"), lanes.ends["a1"], lane="A"),
        Step(0, "a2", lanes.action("a2"), lanes.ends["a2"], [twice], "A"),
        Step(0, "b1", lanes.action("b1"), lanes.ends["b1"], [twice], "B"),
    ]
    task = asyncio.create_task(run_steps(env, steps, 5.0, lambda _: None))
    await within(lanes.ends["a1"].wait(), 5.0)
    assert not actor.reached("tick", 2).is_set()
    actor.saw("tick")
    actor.saw("tick")
    ran = await within(task, 5.0)
    assert lanes.ran == ["a1", "a2", "b1"]
    assert [r["step"] for r in ran] == lanes.ran


async def test_a_step_that_never_comes_due_fails_the_story_naming_it() -> None:
    """A guard never set ends the story with a ScenarioFailure naming the step and what it
    waited for, after the bound."""
    env = _env()
    never = asyncio.Event()
    step = Step(0, "B tries", lambda: None, asyncio.Event(), [("A's lease to end", never)])
    with pytest.raises(ScenarioFailure, match="stuck at B tries: waiting for A's lease to end"):
        await run_steps(env, [step], 0.05)
