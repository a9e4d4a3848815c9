"""Processes by PID, from /proc, and a child's tie to the lab: the one place for them.

Standard library only, and no other lab module: worker children, the fork server and the
delay proxies import it before anything else, and the reaper (lab/procs/lifecycle.py,
in an interpreter of its own) uses it too.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int, code: int = 0) -> None:
    """Linux: SIGKILL this process when `parent` (the lab) dies, even while it is
    stopped; if it already has, exit now with `code` (no signal would ever come)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(code)


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat from its third field on (comm may hold spaces); None: no process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def proc_state(pid: int) -> str | None:
    """R, S, D, T (stopped), Z (zombie)...; None when there is no such process."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def alive(pid: int) -> bool:
    """Running (not a zombie): a zombie child of ours is reaped on the way."""
    if pid <= 0:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    state = proc_state(pid)
    return state is not None and state != "Z"
