"""Processes by PID, from /proc, and a child's tie to the lab: the one place for them.

Standard library only, and no other lab module: worker children, the fork server and the
delay proxies import it before anything else, and the reaper (lab/procs/lifecycle.py,
in an interpreter of its own) uses it too.

The package: ``workers`` (worker processes the harness owns: one protocol, faults as
steps, they die with the lab), ``forkserver`` (a template process that forks them with
their imports done), ``lifecycle`` (lab folders, the processes started in them, the reaper
that stops them if the lab dies), ``netdelay`` (a TCP delay proxy in its own process, for
--rtt), ``procstat`` (CPU seconds and peak memory of a process), ``trust`` (the user the
servers run as, and the files the lab reads only when they are the user's own).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from pathlib import Path

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


def proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None: no such process)."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None


def proc_ppid(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[1]) if fields else None


def proc_exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return None


def proc_uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def proc_cwd(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def proc_cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def is_recorded(pid: int, start: int, exe: str) -> bool:
    """Whether `pid` is still the process recorded: same start time, same executable."""
    return alive(pid) and proc_start(pid) == start and proc_exe(pid) == exe


def points_into(pid: int, folder: Path) -> bool:
    """Whether the process works in `folder` or names it on its command line."""
    where = str(folder)
    cwd = proc_cwd(pid) or ""
    return cwd == where or cwd.startswith(where + "/") or where + "/" in proc_cmdline(pid) + "/"
