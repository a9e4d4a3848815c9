"""A process actor for tests/test_stage.py: its two steps (`one`, `two`) on a ChildGate."""

from __future__ import annotations

import asyncio

from lab.core.steps import Session
from lab.pinned.stage import ChildGate
from lab.procs.workers import Child, run_child


async def main(child: Child) -> str:
    s = Session(child.config["who"], None, 0, gate=ChildGate(child))
    await s.step("one", asyncio.sleep, 0, shown="sleep 0", result=lambda _: "slept")
    await s.step("two", asyncio.sleep, 0, shown="sleep 0 again", result=lambda _: "slept")
    return "done"


if __name__ == "__main__":
    run_child(main)
