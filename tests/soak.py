"""`make soak`: repeat the kill, Ctrl-C and server-death trials and count what leaks.

Not part of `make test` (minutes, not seconds). Every trial runs `locklab run` on its own
embedded servers with its own TMPDIR (so only its lab folders are counted) and then:

* kill:  SIGKILL of the lab at a random moment once its servers are up, then the next
         lab command;
* int:   SIGINT (Ctrl-C) at a random moment: a third from the start (often while Python
         still imports), the rest once the servers are up;
* pg:    SIGKILL of the postmaster once the actors are connected (money-transfer);
* redis: SIGKILL of Redis once 500 of 2,000 waiters are connected (cache-stampede).

Counted: servers left (processes whose command line or working directory points into
the trial's folders, read from /proc), tracebacks (in the lab's stderr and the next
command's), half records (a temp file or a cut record; for a server death, any record at all: a
failed run claims no results),
and for server deaths whether the one line names the server.

    python tests/soak.py [--kill 20] [--int 20] [--pg 10] [--redis 10] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.procs import proc_cmdline  # noqa: E402
from lab.procs.lifecycle import lab_processes  # noqa: E402

LAB = [sys.executable, "-m", "lab.cli"]
ECHOES = ("Traceback", "never retrieved", "Failed to restore")
FROM_START_S = (0.3, 5.0)  # a signal "from the start" lands uniformly in this window
AFTER_SERVERS_S = (0.0, 3.0)  # ... or this long after the lab reported its servers
REAPER_EXIT_S = 10.0
RUNS = {
    "checkout": ["run", "checkout-deadlock", "-v", "buggy", "-n", "40"],
    "stampede": ["run", "cache-stampede", "-v", "buggy", "-n", "500"],
    "money": ["run", "money-transfer", "-v", "buggy", "-n", "40"],
    # a rebuild long enough that the waiters still poll when Redis is killed
    "stampede-2000": [
        "run",
        "cache-stampede",
        "-v",
        "buggy",
        "-n",
        "2000",
        "-p",
        "rebuild_ms=3000",
        "-p",
        "max_polls=100",
    ],
}


@dataclass
class Tally:
    trials: int = 0
    servers_left: int = 0
    reapers_left: int = 0
    tracebacks: int = 0
    half_records: int = 0
    named: int = 0
    swept: int = 0  # kill trials where the next command, not the reaper, stopped servers
    starting: int = 0  # signal landed while Python was still importing (nothing started)
    whole_records: int = 0  # kill / int: records of the variant, finished before the signal
    exits: dict[int, int] = field(default_factory=dict)


def _sockets(pid: int) -> int:
    n = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    for fd in fds:
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return n


def _whole_record(path: Path) -> bool:
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return path.suffix == ".json" and isinstance(rec, dict) and {"outcomes", "claims"} <= set(rec)


def _reapers(lab_pid: int) -> list[int]:
    mark = f" reap {lab_pid} "  # lifecycle.REAPER's arguments
    return [
        int(p)
        for p in os.listdir("/proc")
        if p.isdigit() and mark in (cmd := proc_cmdline(int(p))) and "lab.procs.lifecycle" in cmd
    ]


def trial(kind: str, rng: random.Random, tally: Tally) -> str:
    root = Path(tempfile.mkdtemp(prefix="locklab-soak-", dir="/tmp"))
    root.chmod(0o755)  # the server user (nobody, when root) passes through to its folders
    results = root / "results"
    env = {**os.environ, "TMPDIR": str(root), "LOCKLAB_SERVERS": "embedded", "NO_COLOR": "1",
           "LOCKLAB_RESULTS": str(results)}  # fmt: skip
    scenario = {"kill": rng.choice(["checkout", "stampede"]), "int": "checkout",
                "pg": "money", "redis": "stampede-2000"}[kind]  # fmt: skip
    errfile = root / "stderr.txt"
    with open(errfile, "w") as err:
        lab = subprocess.Popen([*LAB, *RUNS[scenario]], stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=ROOT)  # fmt: skip
    reapers: list[int] = []
    extra = ""
    try:
        if kind in ("kill", "int"):
            if kind == "int" and rng.random() < 1 / 3:
                time.sleep(rng.uniform(*FROM_START_S))  # time is the subject: a random moment
            else:
                deadline = time.monotonic() + 120
                while "server " not in errfile.read_text() and time.monotonic() < deadline:
                    time.sleep(0.02)
                time.sleep(rng.uniform(*AFTER_SERVERS_S))  # time is the subject, as above
            reapers = _reapers(lab.pid)
            lab.send_signal(signal.SIGKILL if kind == "kill" else signal.SIGINT)
        else:
            want, target = (40, "pgdata") if kind == "pg" else (500, "redis-server")
            deadline = time.monotonic() + 120
            while _sockets(lab.pid) < want and lab.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            reapers = _reapers(lab.pid)
            for pid, cmd in lab_processes([root]):
                if target in cmd:
                    os.kill(pid, signal.SIGKILL)
        code = lab.wait(timeout=120)
        if kind == "kill":  # the next lab command
            nxt = subprocess.run([*LAB, "servers", "status"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)  # fmt: skip
            extra = nxt.stderr
        left = lab_processes([root])
        deadline = time.monotonic() + REAPER_EXIT_S  # a reaper exits soon after its lab
        while any(Path(f"/proc/{p}").exists() for p in reapers) and time.monotonic() < deadline:
            time.sleep(0.05)
        reapers_left = [p for p in reapers if Path(f"/proc/{p}").exists()]
        stderr = errfile.read_text() + extra
        last = (errfile.read_text().strip().splitlines() or [""])[-1]
        files = [p for p in results.rglob("*") if p.is_file()]
        broken = [p for p in files if not _whole_record(p)]  # a temp file, a cut record
        whole = [p for p in files if p not in broken]
        # A failed run must leave no record; a killed or interrupted one may keep the
        # whole records of variants that finished (each is written atomically).
        half = broken + (whole if kind in ("pg", "redis") else [])
        product = {"pg": "PostgreSQL", "redis": "Redis"}.get(kind)
        named = bool(product) and bool(
            re.match(rf"^locklab: {product} at 127\.0\.0\.1:\d+ went away during ", last)
        )
        tally.trials += 1
        tally.servers_left += len(left)
        tally.reapers_left += len(reapers_left)
        tally.tracebacks += any(e in stderr for e in ECHOES)
        tally.half_records += len(half)
        tally.whole_records += len(whole) if kind in ("kill", "int") else 0
        tally.named += named
        tally.swept += "earlier lab run" in extra
        tally.starting += "interrupted while starting" in last
        tally.exits[code] = tally.exits.get(code, 0) + 1
        shown = ""
        if any(e in stderr for e in ECHOES):  # the whole stderr: what printed a traceback
            shown = "\n" + "\n".join("      " + line for line in stderr.splitlines())
        return (
            f"{kind:<5} {scenario:<13} exit {code:>4}  left {len(left)}  "
            f"reapers {len(reapers_left)}  half {len(half)}  | {last[:110]}{shown}"
        )
    finally:
        if lab.poll() is None:
            lab.kill()
            lab.wait()
        for pid, _ in lab_processes([root]):  # never leave anything behind, counted or not
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("kill", 20), ("int", 20), ("pg", 10), ("redis", 10)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    started = time.monotonic()
    report = []
    for kind in ("kill", "int", "pg", "redis"):
        tally = Tally()
        for i in range(getattr(args, kind)):
            print(f"[{i + 1:>2}] " + trial(kind, rng, tally), flush=True)
        report.append((kind, tally))
    print(f"\nsoak: {time.monotonic() - started:.0f} s, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")  # fmt: skip
    bad = 0
    for kind, t in report:
        exits = ", ".join(f"{k}: {v}" for k, v in sorted(t.exits.items()))
        named = f"  named {t.named}/{t.trials}" if kind in ("pg", "redis") else ""
        named += f"  stopped by the next command {t.swept}" if kind == "kill" else ""
        named += f"  of which while starting {t.starting}" if kind == "int" else ""
        named += f"  whole records kept {t.whole_records}" if kind in ("kill", "int") else ""
        print(
            f"{kind:<5} trials {t.trials:>3}  servers left {t.servers_left}  reapers left "
            f"{t.reapers_left}  tracebacks {t.tracebacks}  half records {t.half_records}"
            f"{named}  exits {{{exits}}}"
        )
        bad += t.servers_left + t.reapers_left + t.tracebacks + t.half_records
        bad += (t.trials - t.named) if kind in ("pg", "redis") else 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
