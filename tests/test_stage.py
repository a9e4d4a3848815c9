"""A cast on the Sequencer with real worker processes (lab/pinned/stage.py): steps granted in
a schedule's order, faults as steps, `<waiting ...>` for a step granted to a frozen actor,
the isolation tester's rules."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lab.core.scenario import Env
from lab.core.steps import Session
from lab.errors import ScenarioFailure
from lab.pinned.cast import InvalidPermutation, ScheduleError
from lab.pinned.rules import Rules
from lab.pinned.sequencer import Sequencer
from lab.pinned.stage import Fault, InProcess
from lab.pinned.timed import Step, run_steps

SCRIPT = Path(__file__).parent / "data" / "workers" / "stage_worker.py"
FAULTS = {"pause": Fault("pause"), "wake": Fault("wake"), "kill": Fault("kill")}


def env() -> Env:
    return Env(scenario="stage-test", variant="v", dsn="", database="", db=None, redis=None,
               prefix="", params={}, seed=1, n=2)  # fmt: skip


async def local(s: Session) -> str:
    """The actor in the lab's loop: two steps that return what they were given."""
    await s.step("one", _value, 1, shown="value 1")
    await s.step("two", _value, 2, shown="value 2")
    return "done"


async def _value(x: int) -> int:
    return x


def stage(faults: dict[str, Fault] = FAULTS, finish: bool = False) -> Sequencer:
    """P in a worker process, L in the lab's loop; no server to look at (db None)."""
    none: Any = None  # the actors here take no PostgreSQL connection
    return Sequencer(
        None,
        {"P": (none, local), "L": (none, local)},
        processes={"P": InProcess(SCRIPT, {"who": "P"}, faults)},
        env=env(),
        rules=Rules(finish=finish),
        label="stage-test",
        header="schedule t",
    )


async def test_a_step_granted_to_a_frozen_actor_waits_until_it_wakes() -> None:
    """P is paused, granted `one` (<waiting ...>), woken: its step completes after the wake."""
    st = stage()
    out = await st.run(["P pause", "P one", "L one", "P wake", "P two", "L two"])
    assert out == {"P": "done", "L": "done"}
    assert st.transcript.text() == (
        "schedule t\n"
        "P pause  SIGSTOP        -> stopped\n"
        "P one    sleep 0        <waiting ...>\n"
        "L one    value 1        -> 1\n"
        "P wake   SIGCONT        -> running\n"
        "P one                   <... completed> slept\n"
        "P two    sleep 0 again  -> slept\n"
        "L two    value 2        -> 2\n"
        "P                       ends done\n"
        "L                       ends done\n"
    )
    assert st.waited == ["P one"]


async def test_a_killed_actor_skips_its_remaining_steps() -> None:
    """Kill is a step: the actor ends `killed` and its later steps are skipped, said so."""
    st = stage()
    out = await st.run(["P one", "P pause", "P kill", "P two", "L one", "L two"])
    assert out == {"P": "killed", "L": "done"}
    assert "P two" in st.transcript.text() and "(skipped: P ended: killed)" in st.transcript.text()


async def test_a_step_for_an_actor_frozen_in_a_step_is_an_invalid_permutation() -> None:
    """As the isolation tester: asking a still-blocked actor for its next step is invalid."""
    with pytest.raises(InvalidPermutation, match="P two: P is frozen in one"):
        await stage().run(["P pause", "P one", "P two", "P wake", "L one", "L two"])


async def test_a_pause_waits_for_the_condition_it_declares() -> None:
    """A pause's `until` is polled after the stop; one that never holds fails, named."""
    seen: list[int] = []

    async def never(e: Env) -> bool:
        seen.append(1)
        return False

    faults = {**FAULTS, "pause": Fault("pause", never, "the moon", seconds=0.2)}
    with pytest.raises(ScenarioFailure, match=r"P pause: the moon: not within 0\.2 s"):
        await stage(faults).run(["P pause", "P wake", "P one", "P two", "L one", "L two"])
    assert seen


async def test_schedules_that_do_not_fit_are_refused() -> None:
    """An unknown actor, or steps left over after the schedule, is a ScheduleError; with
    `finish` the steps left over run in the cast's order."""
    with pytest.raises(ScheduleError, match="sessions are P, L"):
        await stage().run(["Q one"])
    with pytest.raises(ScheduleError, match="after its last step"):
        await stage().run(["P one", "L one"])
    st = stage(finish=True)
    assert await st.run(["L one", "P one"]) == {"P": "done", "L": "done"}
    assert [ln.who for ln in st.transcript.lines[:4]] == ["L one", "P one", "P two", "L two"]


async def test_the_same_schedule_prints_the_same_text() -> None:
    """Three runs of one schedule with a process actor: one text (no pid, no time)."""
    texts = set()
    for _ in range(3):
        st = stage()
        await st.run(["P one", "P pause", "L one", "P wake", "L two", "P two"])
        texts.add(st.transcript.text())
    assert len(texts) == 1


async def test_timed_steps_run_in_time_order_each_after_the_one_before() -> None:
    """lab.pinned.timed: steps start in planned order (not listed order); one whose end never
    comes fails the run, naming the step."""
    order: list[str] = []
    ends = {name: asyncio.Event() for name in ("first", "second")}

    def act(name: str) -> Callable[[], None]:
        def start() -> None:
            order.append(name)
            ends[name].set()

        return start

    steps = [Step(5.0, "second", act("second"), ends["second"]),
             Step(0.0, "first", act("first"), ends["first"])]  # fmt: skip
    ran = await run_steps(env(), steps, 5.0)
    assert order == ["first", "second"] == [r["step"] for r in ran]
    with pytest.raises(ScenarioFailure, match="stuck at never"):
        await run_steps(env(), [Step(0.0, "never", lambda: None, asyncio.Event())], 0.05)
