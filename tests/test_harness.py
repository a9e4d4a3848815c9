"""What the harness owns for a scenario: per-run state on Env, observers with a
start/stop lifecycle around the variant, and the one bounded wait (lab.aio.until)."""

from __future__ import annotations

from typing import Any

import pytest

from lab.aio import until
from lab.core.scenario import Check, Env, Observer, Scenario, start_observers, stop_observers
from lab.errors import ScenarioFailure
from lab.load.plan import RunPlan
from lab.load.runner import run_plan
from lab.servers import Servers
from tests.conftest import knobs_for


async def test_until_returns_the_first_truthy_value() -> None:
    """until() polls a check and returns its first truthy value."""
    seen = iter([0, None, "", 3])
    assert await until(lambda: next(seen), 1, "counting") == 3


async def test_until_awaits_an_async_check() -> None:
    """until() awaits a check that is a coroutine function."""
    calls: list[int] = []

    async def check() -> bool:
        calls.append(1)
        return len(calls) >= 2

    assert await until(check, 1, "two calls") is True
    assert len(calls) == 2


async def test_until_fails_loudly_naming_what_and_the_last_value() -> None:
    """until() gives up with one line naming what it waited for and the last value seen."""
    with pytest.raises(
        ScenarioFailure, match=r"^the lock is free: not within 0.05 s \(last seen: 0\)$"
    ):
        await until(lambda: 0, 0.05, "the lock is free", every=0.01)


def _recorder(log: list[str], name: str, fail_start: bool = False) -> Observer:
    async def start(env: Env) -> None:
        if fail_start:
            raise RuntimeError(f"{name} cannot start")
        log.append(f"start {name}")

    async def stop(env: Env) -> None:
        log.append(f"stop {name}")

    return Observer(name, start, stop)


def _env() -> Env:
    return Env(scenario="toy", variant="buggy", dsn="", database="", db=None, redis=None,
               prefix="p:", params={}, seed=1, n=1)  # fmt: skip


async def test_observers_start_in_order_and_stop_last_first() -> None:
    """Observers start in the declared order, stop in reverse, and stop only once."""
    log: list[str] = []
    started = await start_observers((_recorder(log, "a"), _recorder(log, "b")), _env())
    await stop_observers(started, _env())
    assert log == ["start a", "start b", "stop b", "stop a"]
    assert started == []  # stopping twice stops nothing twice


async def test_an_observer_that_cannot_start_stops_the_ones_before_it() -> None:
    """An observer that fails to start stops the ones started before it and raises."""
    log: list[str] = []
    obs = (_recorder(log, "a"), _recorder(log, "b", fail_start=True), _recorder(log, "c"))
    with pytest.raises(RuntimeError, match="b cannot start"):
        await start_observers(obs, _env())
    assert log == ["start a", "stop a"]


async def test_the_runner_stops_observers_before_the_invariant_and_after_a_failure(
    servers: Servers,
) -> None:
    """State lives on env.state; the observer is started after setup, stopped before the
    invariant reads what it saw, and stopped also when the variant raises."""
    log: list[str] = []

    async def setup(env: Env) -> None:
        log.append("setup")
        env.state["seen"] = 0

    async def start(env: Env) -> None:
        log.append("start")

    async def stop(env: Env) -> None:
        log.append("stop")
        env.state["seen"] += 1

    async def ok(env: Env) -> None:
        log.append("variant")
        env.outcome("ok")

    async def boom(env: Env) -> None:
        raise RuntimeError("the variant failed")

    async def invariant(env: Env) -> list[Check]:
        log.append("invariant")
        return [Check("observer stopped once", env.state["seen"] == 1, str(env.state["seen"]))]

    toy = Scenario(id="toy", doc="Toy.\n", kind="script", variants={"buggy": ok, "fixed": boom},
                   outcomes=("ok",), uses=frozenset(), setup=setup, invariant=invariant,
                   observers=(Observer("watch", start, stop),))  # fmt: skip
    records: Any = await run_plan(
        RunPlan(toy, ["buggy"], knobs_for(toy), {}, "t", write=False), servers
    )
    assert log == ["setup", "start", "variant", "stop", "invariant"]
    assert records[0]["invariants"][0]["held"] is True
    log.clear()
    with pytest.raises(ScenarioFailure, match="the variant failed"):
        await run_plan(RunPlan(toy, ["fixed"], knobs_for(toy), {}, "t", write=False), servers)
    assert log == ["setup", "start", "stop"]
