"""CPU seconds and peak memory of a process, read from /proc (Linux; 0 elsewhere)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """CPU seconds `pid` has run, all its live threads: the time on a CPU each thread's
    /proc/<pid>/task/<tid>/schedstat counts in ns (a short window of a mostly waiting
    client is a few ms: utime + stime, in 10 ms ticks, read 0 there). Where the kernel
    keeps no schedstat, utime + stime; 0.0 if unreadable."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        tasks = []
    ns, seen = 0, False
    for task in tasks:
        try:
            ns += int((task / "schedstat").read_text().split()[0])
            seen = True
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    if seen:
        return ns / 1e9
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICKS


def total_cpu_seconds(pids: Iterable[int]) -> float:
    return sum(cpu_seconds(p) for p in pids)


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM) in MiB, or 0.0 if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores (/proc/stat)."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return 0.0, 0.0
    ticks = [int(x) for x in first[1:9]]  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    return (sum(ticks) - idle) / TICKS, sum(ticks) / TICKS


def run_delay_s(pid: int | str = "self") -> float:
    """Seconds `pid`'s main thread was runnable but waiting for a CPU (the second field of
    /proc/<pid>/schedstat, in ns), or 0.0 where the kernel does not say."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0
