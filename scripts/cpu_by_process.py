"""CPU seconds of a command's own processes, by kind, read from /proc while it runs.

Runs COMMAND, samples /proc every SAMPLE_S, and counts every process descended from it
(other runs on the machine are left out; a daemonised PostgreSQL is not a descendant, and
a process living less than SAMPLE_S can go unseen). Prints the CPU by kind (lane, lab
main, lab worker processes, ...) and the lab's worker processes by script or module.

    .venv/bin/python scripts/cpu_by_process.py .venv/bin/locklab verify cron-rerun --json --no-record
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time

SAMPLE_S = 0.1
HZ = os.sysconf("SC_CLK_TCK")


def snapshot() -> dict[int, tuple[int, str, int]]:
    """pid -> (CPU ticks, command line, parent pid) of every process now."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        out[int(d)] = (int(st[11]) + int(st[12]), cmd, int(st[1]))
    return out


def kind(cmd: str) -> str:
    if "postgres" in cmd and ("postgres:" in cmd or "/bin/postgres" in cmd):
        return "postgres"
    if "redis-server" in cmd or "falkordb" in cmd:
        return "redis"
    if "lane_child" in cmd:
        return "lane"
    if "lab.cli" in cmd or "bin/locklab" in cmd:
        return "lab-main"
    if "python" in cmd and ("lab" in cmd or "scenarios" in cmd):
        return "lab-other"
    return "other"


def what(cmd: str) -> str:
    """A worker's script (its folder and name) or ``-m module``."""
    args = cmd.split()
    if args[1:2] == ["-m"]:
        return " ".join(args[1:3])
    return "/".join(args[1].split("/")[-2:]) if len(args) > 1 else cmd


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: cpu_by_process.py COMMAND [ARGS...]\n")
        return 2
    before = snapshot()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mine = {proc.pid}
    seen: dict[int, tuple[int, str]] = {}
    t0 = time.monotonic()
    while proc.poll() is None:
        now = snapshot()
        mine |= {pid for pid, (_, _, ppid) in now.items() if ppid in mine and pid not in before}
        for pid, (ticks, cmd, _) in now.items():
            if pid in mine:  # a zombie has no command line: keep the last one seen
                seen[pid] = (ticks, cmd or seen.get(pid, (0, ""))[1])
        time.sleep(SAMPLE_S)
    wall = time.monotonic() - t0
    by_kind: dict[str, float] = collections.defaultdict(float)
    by_what: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for ticks, cmd in seen.values():
        by_kind[kind(cmd)] += ticks / HZ
        if kind(cmd) == "lab-other":
            by_what[what(cmd)][0] += 1
            by_what[what(cmd)][1] += ticks / HZ
    print(f"wall {wall:.1f} s, exit {proc.returncode};",
          ", ".join(f"{k} {v:.2f}" for k, v in sorted(by_kind.items(), key=lambda x: -x[1])), "CPU-s")  # fmt: skip
    for name, (n, cpu) in sorted(by_what.items(), key=lambda x: -x[1][1]):
        print(f"  {cpu:6.2f} CPU-s over {int(n):3d} processes  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
