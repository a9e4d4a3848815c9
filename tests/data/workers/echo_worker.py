"""A worker for tests/test_workers.py: one event, two granted steps, `fail` to raise."""

from __future__ import annotations

from lab.procs.workers import Child, run_child


async def main(child: Child) -> str:
    child.emit("hello", who=child.config["who"])
    await child.step("go")
    if child.config.get("fail"):
        raise ValueError("asked to fail")
    child.emit("went")
    await child.step("end")
    return str(child.config["who"])


if __name__ == "__main__":
    run_child(main)
