"""Every process the lab starts dies with it; nothing is removed that the lab did not make.

Lab folders. Each lab command that starts a server makes one folder per group of servers,
``<tmp>/locklab-run-XXXXXXXX``, owned by the lab's user::

    lab.json     the marker: {"lab": "locklab", "owner_pid", "owner_start", "uid", "kept"}
    procs.jsonl  one line per process started in it: {"pid", "start", "exe", "sig"}
    srv/         the servers' own files (owned by the server user: ``nobody`` when root)

``owner_start`` is the owner's start time in clock ticks since boot (``/proc/PID/stat``
field 22), so a PID the kernel reused is not mistaken for the owner. A folder is the lab's
only if its name has the prefix, it is a real directory (not a symlink) owned by the
lab's user, and its marker is a regular file owned by that user that says so; nothing
else is ever removed. A process is signalled only when ``/proc`` shows it is the one
recorded: same start time and same executable (or, for PostgreSQL's backends, the
recorded executable with its working directory or command line inside the folder).

Dying with the lab. The first folder a process makes starts a reaper (the way
testcontainers starts Ryuk): a small stdlib-only Python process in its own session that
holds the read end of a pipe whose write end only the lab holds. When the lab ends, by
any means including SIGKILL, the pipe reads EOF and the reaper stops every process
recorded in the folders that lab owns (unless kept) and removes them. PR_SET_PDEATHSIG
is not used: it fires when the parent *thread* ends, and the lab starts servers from
worker threads (``asyncio.to_thread``); and ``pg_ctl`` daemonises the postmaster anyway.
Should the reaper die too, the next lab command's ``sweep_orphans()`` does its work.

For new kinds of child process (a proxy, more Redis nodes): ``base = make_base_dir()``,
then ``spawn(cmd, base)`` (or ``register(base, pid, exe)`` for a process something else
started), and ``remove_base_dir(base)`` after stopping it; the reaper and the sweep then
cover it. This module imports only the standard library and lab.procs (also stdlib only); the
reaper runs its main() in an interpreter of its own (REAPER).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from lab.procs import alive as alive
from lab.procs import alive as pid_alive
from lab.procs import (
    all_pids,
    is_recorded,
    points_into,
    proc_cmdline,
    proc_cwd,
    proc_exe,
    proc_ppid,
    proc_start,
    proc_uid,
)
from lab.procs import proc_state as proc_state
from lab.procs.trust import (
    as_server_user,
    distrust,
    read_trusted_json,
    server_ids,
    write_private_json,
)

PREFIX = "locklab-run-"
MARKER = "lab.json"
PROCS = "procs.jsonl"
SERVER_DIR = "srv"
STOP_WAIT_S = 3.0  # after the polite signal, before SIGKILL

_reaper: dict[int, int] = {}  # pid of the lab process -> write end of its reaper's pipe
_started: dict[int, int] = {}  # pid -> start time, of every process this process registered


# --- /proc ---------------------------------------------------------------------------


def lab_processes(roots: Sequence[Path] | None = None) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose command line or working directory points
    into a lab folder (under `roots`, default: every place lab folders are made). What
    "servers left" counts; read from /proc, never from `ps` (it cuts args to $COLUMNS)."""
    found = []
    marks = [str(r) + "/" + PREFIX for r in (roots or scan_roots())]
    for pid in all_pids():
        if pid == os.getpid():
            continue
        text = proc_cmdline(pid) + " " + (proc_cwd(pid) or "")
        if any(m in text for m in marks) and proc_state(pid) not in (None, "Z"):
            found.append((pid, proc_cmdline(pid)))
    return found


# --- the reaper ------------------------------------------------------------------------


# The reaper: this module's main() in a fresh interpreter, isolated (-I: no PYTHON*
# variables, no user site), with the folder that holds the lab package first on its path.
REAPER = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from lab.procs.lifecycle import main; sys.exit(main(sys.argv[2:]))"
)


def _root() -> str:
    return str(Path(__file__).resolve().parents[2])


def ensure_reaper() -> None:
    """Start, once per lab process, the reaper that cleans up after it when it dies."""
    me = os.getpid()
    if me in _reaper:
        return
    start = proc_start(me)
    read_end, write_end = os.pipe()  # not inherited by other children: only we hold it
    try:
        subprocess.Popen(
            [sys.executable, "-I", "-c", REAPER, _root(), "reap", str(me), str(start)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the terminal's group is not for it
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    _reaper[me] = write_end


def _reap(owner_pid: int, owner_start: int) -> None:
    """Wait until the owner's end of the pipe closes, then stop what it left running."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    for folder, marker in lab_folders():
        mine = (marker.get("owner_pid"), marker.get("owner_start")) == (owner_pid, owner_start)
        if mine and not marker.get("kept"):
            stop_folder(folder)


# --- lab folders -----------------------------------------------------------------------


def scan_roots() -> list[Path]:
    """Where lab folders are made (see make_base_dir)."""
    roots = [Path(tempfile.gettempdir()), Path("/tmp")]
    return list(dict.fromkeys(roots))


def folder_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of a folder the lab made, or None when `folder` is not provably the lab's."""
    if not folder.name.startswith(PREFIX) or distrust(folder, directory=True, private=False):
        return None
    marker = read_trusted_json(folder / MARKER)
    if marker is None or marker.get("lab") != "locklab" or marker.get("uid") != os.geteuid():
        return None
    return marker


def lab_folders() -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every folder under the scan roots that is provably this user's lab folder."""
    for root in scan_roots():
        try:
            names = [n for n in os.listdir(root) if n.startswith(PREFIX)]
        except OSError:
            continue
        for name in names:
            if (marker := folder_marker(root / name)) is not None:
                yield root / name, marker


def make_base_dir() -> Path:
    """A fresh lab folder; returns its ``srv`` subfolder, where servers keep data, logs and
    sockets (short: socket paths must stay under 107 bytes), owned by the server user."""
    ensure_reaper()
    root = tempfile.gettempdir()
    if len(root) > 60 or (os.geteuid() == 0 and not _others_can_enter(Path(root))):
        root = "/tmp"
    folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=root))
    marker = {
        "lab": "locklab",
        "owner_pid": os.getpid(),
        "owner_start": proc_start(os.getpid()),
        "uid": os.geteuid(),
        "kept": False,
    }
    write_private_json(folder / MARKER, marker, 0o644)
    srv = folder / SERVER_DIR
    srv.mkdir(mode=0o700)
    if os.geteuid() == 0:
        folder.chmod(0o711)  # the server user passes through to srv/, lists nothing
        uid, gid = server_ids()
        os.chown(srv, uid, gid)
    return srv


def _others_can_enter(path: Path) -> bool:
    """Whether every folder down to `path` lets other users through (the server user must
    reach its data folder; a private 0700 parent, such as pytest's tmp_path, does not)."""
    return all(p.stat().st_mode & 0o001 for p in (path, *path.parents))


def folder_of(base: Path) -> Path:
    """The lab folder a ``make_base_dir()`` result lives in."""
    return base.parent if base.name == SERVER_DIR else base


def register(base: Path, pid: int, exe: str | Path, sig: int = signal.SIGTERM) -> None:
    """Record a process started for `base`'s lab folder: the reaper and the sweep stop it
    (with `sig`, then SIGKILL), and only while it is still this process."""
    start = proc_start(pid)
    if start is not None:
        _started[pid] = start
        _record(base, {"pid": pid, "start": start, "exe": os.path.realpath(exe), "sig": int(sig)})


def still_ours(pid: int) -> bool:
    """False when `pid` was registered by this process and is now another process (the
    kernel reused the PID); True otherwise (running or not: the caller checks that)."""
    return pid not in _started or proc_start(pid) in (None, _started[pid])


def expect(base: Path, exe: str | Path, sig: int = signal.SIGTERM) -> None:
    """Record that processes of `exe` working in `base`'s lab folder are the lab's, before
    one exists (a server that a helper daemonises, such as pg_ctl's postmaster)."""
    _record(base, {"pid": 0, "start": 0, "exe": os.path.realpath(exe), "sig": int(sig)})


def _record(base: Path, entry: dict[str, Any]) -> None:
    folder = folder_of(base)
    if folder_marker(folder) is None:
        return
    fd = os.open(folder / PROCS, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "a") as f:
        f.write(json.dumps(entry) + "\n")


def spawn(
    cmd: list[str], base: Path, *, as_server: bool = True, sig: int = signal.SIGTERM
) -> subprocess.Popen[bytes]:
    """Start `cmd` for the lab folder of `base` so that it dies with the lab: in its own
    session (a Ctrl-C is the lab's to handle), as the server user when the lab is root,
    working in `base` (so a /proc scan finds it there), output to /dev/null (a server logs
    to its file), recorded for the reaper and the sweep. The caller stops it
    (``stop_pid``) and calls ``remove_base_dir(base)`` when done."""
    exe = shutil.which(cmd[0]) or cmd[0]
    proc = subprocess.Popen(
        as_server_user(cmd) if as_server else cmd,
        cwd=base,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    register(base, proc.pid, exe, sig)
    return proc


def mark_kept(base: Path, kept: bool = True) -> None:
    """Kept folders (``servers up``) outlive the command that made them."""
    folder = folder_of(base)
    marker = folder_marker(folder)
    if marker is not None:
        write_private_json(folder / MARKER, {**marker, "kept": kept}, 0o644)


def _recorded(folder: Path) -> list[dict[str, Any]]:
    path = folder / PROCS
    if distrust(path, directory=False, private=False):
        return []
    entries = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and {"pid", "start", "exe"} <= set(entry):
                entries.append(entry)
    return entries


def folder_processes(folder: Path) -> dict[int, int]:
    """pid -> stop signal of each live process the lab started for `folder`: the recorded
    ones still the same process, and processes of a recorded executable working in the
    folder (PostgreSQL's backends), run by the lab's or the server user."""
    entries = _recorded(folder)
    found = {
        int(e["pid"]): int(e.get("sig", signal.SIGTERM))
        for e in entries
        if int(e["pid"]) > 0 and is_recorded(int(e["pid"]), int(e["start"]), str(e["exe"]))
    }
    exes = {str(e["exe"]): int(e.get("sig", signal.SIGTERM)) for e in entries}
    users = {os.geteuid(), server_ids()[0]}
    if exes:
        for pid in all_pids():
            exe = proc_exe(pid)
            if pid in found or exe not in exes or proc_uid(pid) not in users:
                continue
            if alive(pid) and points_into(pid, folder):
                found[pid] = exes[exe]
    return found


def stop_folder(folder: Path) -> list[str]:
    """Stop the processes of one lab folder (their signal, SIGKILL after STOP_WAIT_S) and
    remove it, if it is provably the lab's; returns what was signalled ("redis-server pid 7")."""
    if folder_marker(folder) is None:
        return []
    procs = folder_processes(folder)
    names = [f"{Path(proc_exe(p) or '?').name} pid {p}" for p in sorted(procs)]
    for pid, sig in procs.items():
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
            os.kill(pid, signal.SIGCONT)  # a stopped process acts on its signal only now
    deadline = time.monotonic() + STOP_WAIT_S
    while any(alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in procs:
        with contextlib.suppress(OSError):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    for pid in folder_processes(folder):  # backends the postmaster did not take along
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    remove_folder(folder)
    return names


def remove_folder(folder: Path) -> bool:
    """Remove `folder` if, and only if, it is provably a lab folder of this user."""
    if folder_marker(folder) is None:
        return False
    shutil.rmtree(folder, ignore_errors=True)  # does not follow symlinks inside
    return True


def remove_base_dir(base: Path) -> None:
    """Remove what ``make_base_dir()`` made (its processes are the caller's to stop)."""
    remove_folder(folder_of(base))


def owner_alive(marker: dict[str, Any]) -> bool:
    pid, start = marker.get("owner_pid"), marker.get("owner_start")
    return isinstance(pid, int) and alive(pid) and proc_start(pid) == start


def sweep_orphans() -> str | None:
    """Stop the servers of lab folders whose lab process is gone (not kept ones): what the
    reaper would have done had it lived. One line saying what was stopped, or None."""
    stopped: list[str] = []
    folders = 0
    for folder, marker in lab_folders():
        if marker.get("kept") or owner_alive(marker):
            continue
        stopped += stop_folder(folder)
        folders += 1
    if not folders:
        return None
    what = ", ".join(stopped) if stopped else "no process was left"
    return f"cleaned up after {folders} earlier lab run(s) that ended without stopping: {what}"


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "reap":
        _reap(int(argv[1]), int(argv[2]))
        return 0
    sys.stderr.write("usage: python -m lab.procs.lifecycle reap OWNER_PID OWNER_START\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def stop_pid(pid: int, sig: int = signal.SIGTERM, wait: float = 10.0) -> None:
    """Stop one process the lab started, by PID: the signal, then SIGKILL after `wait`
    (at once when it is stopped, SIGSTOP: it would act on nothing else)."""
    if not pid_alive(pid) or not still_ours(pid):
        return
    if proc_state(pid) == "T":
        sig, wait = signal.SIGKILL, 1.0
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def kill_tree(pid: int) -> None:
    """SIGKILL a process the lab started and its children (a postmaster and its backends,
    which a stopped or killed postmaster would not take along)."""
    if not still_ours(pid):
        return
    children = [p for p in all_pids() if proc_ppid(p) == pid]
    for p in (pid, *children):
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in (pid, *children)) and time.monotonic() < deadline:
        time.sleep(0.02)
