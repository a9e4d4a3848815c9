"""A worker for tests/test_forkserver.py: reports how it was started, then waits for "end"."""

from __future__ import annotations

import gc
import os
import random
import signal
import sys

from lab.procs.workers import Child, run_child


async def main(child: Child) -> str:
    child.emit("probe", ppid=os.getppid(), argv=sys.argv[1:], cwd=os.getcwd(),
               path0=sys.path[0], name=__name__, env=os.environ.get("FORK_PROBE", ""),
               rand=random.random(), sid=os.getsid(0) == os.getpid(),
               sigint=signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.SIG_DFL),
               gc=gc.isenabled())  # fmt: skip
    await child.step("end")
    if child.config.get("exit"):
        raise SystemExit(int(child.config["exit"]))
    return "ok"


if __name__ == "__main__":
    run_child(main)
