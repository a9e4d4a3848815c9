"""A lab for tests/test_workers.py: spawns a worker (argv[1] "fork": forked by the fork
server), stops it, prints its PID, its lab folder and its parent's PID, then waits to be
killed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import lab.procs as procs
from lab.procs.workers import Worker

ECHO = Path(__file__).with_name("echo_worker.py")


async def main() -> None:
    w = await Worker.spawn(ECHO, {"who": "A"}, name="A", fork=sys.argv[1:] == ["fork"])
    await w.wait_for("step")
    await w.pause()
    print(w.pid, w.folder, procs.proc_ppid(w.pid), flush=True)
    await asyncio.Event().wait()  # until SIGKILL: the lab never gets to close it


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
