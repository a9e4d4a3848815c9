"""A lab for tests/test_workers.py: spawns a worker, stops it, prints both PIDs and the
worker's lab folder, then waits to be killed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from lab.workers import Worker

ECHO = Path(__file__).with_name("echo_worker.py")


async def main() -> None:
    w = await Worker.spawn(ECHO, {"who": "A"}, name="A")
    await w.wait_for("step")
    await w.pause()
    print(w.pid, w.folder, flush=True)
    await asyncio.Event().wait()  # until SIGKILL: the lab never gets to close it


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
