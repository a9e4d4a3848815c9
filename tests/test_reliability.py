"""Faults, kills and planted files: nothing leaks, nothing is deleted that the lab did not make.

Real servers and real signals: a planted state file or folder (another owner, a symlink,
a foreign folder, a foreign PID) changes nothing; a SIGKILLed lab takes its servers along
(the reaper), and when the reaper dies too the next command stops them; a server killed
or stopped mid-run is named in one line, exit 3, with nothing left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import lab.procs as procs
from lab.procs import lifecycle, proc_start
from lab.procs.lifecycle import MARKER, PREFIX, PROCS, lab_processes, sweep_orphans
from lab.servers import Servers, servers_down
from tests.test_cli import LAB, ROOT, _children, assert_gone, locklab

NOBODY = ("nobody", "nogroup")
FAULT_LINE = r"^locklab: {product} at 127\.0\.0\.1:\d+ {what} during {during}$"
# A rebuild long enough that the 2,000 waiters are still polling when Redis is killed.
LONG_STAMPEDE = ["-p", "rebuild_ms=3000", "-p", "max_polls=100"]
ECHOES = ("Traceback", "never retrieved", "Failed to restore")  # library loggers' tracebacks


def _foreign_uid() -> tuple[int, int]:
    import grp
    import pwd

    return pwd.getpwnam(NOBODY[0]).pw_uid, grp.getgrnam(NOBODY[1]).gr_gid


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is not the lab's server (its PID is what a planted file names)."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def root_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp folder standing in for /tmp: the state folder and lab folders go here."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(lifecycle, "scan_roots", lambda: [tmp_path])
    return tmp_path


def _victim(where: Path, name: str = "victim") -> Path:
    folder = where / name
    folder.mkdir()
    (folder / "precious.txt").write_text("not the lab's\n")
    return folder


def _state(base: Path, pid: int) -> dict[str, object]:
    return {
        "base": str(base / "srv"),
        "pg": {"product": "postgresql", "kind": "embedded", "version": "17", "address": "x"},
        "redis": {"product": "redis", "kind": "embedded", "version": "8", "address": "x"},
        "pg_pid": pid,
        "redis_pid": pid,
        "pg_bindir": "/nonexistent",
    }


def _marker(folder: Path, owner_pid: int, owner_start: int | None, kept: bool = False) -> None:
    marker = {"lab": "locklab", "owner_pid": owner_pid, "owner_start": owner_start}
    (folder / MARKER).write_text(json.dumps({**marker, "uid": os.geteuid(), "kept": kept}))


def test_state_folder_of_another_owner_is_left_alone(
    root_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    """A state folder someone else made (owner nobody) naming a foreign folder and PID:
    `servers down` says so in one line; nothing is removed, nothing signalled."""
    if os.geteuid() != 0:
        pytest.skip("only root can plant a file owned by another user")
    victim = _victim(root_dir)
    planted = root_dir / f"locklab-state-{os.geteuid()}"
    planted.mkdir(mode=0o700)
    (planted / "servers.json").write_text(json.dumps(_state(victim, sleeper.pid)))
    for path in (planted, planted / "servers.json"):
        os.chown(path, *_foreign_uid())
    assert servers_down() == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(r"locklab: .*locklab-state-\d+ is owned by uid", err[0])
    assert (victim / "precious.txt").exists() and sleeper.poll() is None
    assert (planted / "servers.json").exists()


def test_symlinked_state_folder_is_left_alone(
    root_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    """The state folder as a symlink to a folder holding a state file: not followed."""
    victim = _victim(root_dir)
    elsewhere = root_dir / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "servers.json").write_text(json.dumps(_state(victim, sleeper.pid)))
    (root_dir / f"locklab-state-{os.geteuid()}").symlink_to(elsewhere)
    assert servers_down() == []
    assert "is a symlink" in capsys.readouterr().err
    assert (victim / "precious.txt").exists() and sleeper.poll() is None


def test_own_state_folder_too_open_is_closed_not_refused(
    root_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user's own state folder at 755 (others may read, not write): closed to 700 and
    used, without a warning on every command; at 777 (others may write) it is refused,
    and the warning says that."""
    from lab.procs.trust import private_dir

    folder = root_dir / f"locklab-state-{os.geteuid()}"
    folder.mkdir(mode=0o700)
    folder.chmod(0o755)
    assert private_dir(create=False) == folder
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert capsys.readouterr().err == ""
    folder.chmod(0o777)
    assert private_dir(create=False) is None
    assert "has mode 777 (others may write it)" in capsys.readouterr().err


def test_a_trusted_state_file_still_cannot_name_a_foreign_folder_or_pid(
    root_dir: Path, sleeper: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    """Even a state file in the user's own private folder: a folder without the lab's
    marker is not removed, and a PID the folder's own record does not hold (a `sleep`;
    one recorded with another start time) is not signalled."""
    private = root_dir / f"locklab-state-{os.geteuid()}"
    private.mkdir(mode=0o700)
    victim = _victim(root_dir, f"{PREFIX}victim")  # the lab's prefix, no marker
    (private / "servers.json").write_text(json.dumps(_state(victim, sleeper.pid)))
    (private / "servers.json").chmod(0o600)
    assert servers_down() == []
    assert "not a folder the lab keeps" in capsys.readouterr().err
    assert (victim / "precious.txt").exists() and sleeper.poll() is None
    # A real kept folder of the lab's, whose record holds the sleep with a wrong start time.
    kept = root_dir / f"{PREFIX}kept"
    (kept / "srv").mkdir(parents=True)
    _marker(kept, os.getpid(), proc_start(os.getpid()), kept=True)
    wrong = {"pid": sleeper.pid, "start": 1, "exe": "/usr/bin/sleep", "sig": 15}
    (kept / PROCS).write_text(json.dumps(wrong) + "\n")
    (private / "servers.json").write_text(json.dumps(_state(kept, sleeper.pid)))
    assert servers_down() == []  # nothing of the lab's was running there
    assert sleeper.poll() is None
    assert not kept.exists()  # the lab's own (empty) kept folder is gone


def test_sweep_touches_only_provable_orphans(
    root_dir: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """The orphan sweep leaves alone a folder of another owner, one without a marker, a
    symlink, one whose marker is not the user's; it stops a real orphan, whose owner PID
    was reused (same PID, another start time), and only the process it recorded."""
    dead_owner = (os.getpid(), 0)  # this PID now, but not the process that made it
    unmarked = _victim(root_dir, f"{PREFIX}unmarked")
    linked = root_dir / f"{PREFIX}linked"
    linked.symlink_to(_victim(root_dir, "linked-target"))
    foreign_marker = _victim(root_dir, f"{PREFIX}foreignmarker")
    _marker(foreign_marker, *dead_owner)
    record = {"pid": sleeper.pid, "start": proc_start(sleeper.pid), "exe": "/usr/bin/sleep"}
    (foreign_marker / PROCS).write_text(json.dumps(record) + "\n")
    planted = [unmarked, linked, foreign_marker]
    if os.geteuid() == 0:
        os.chown(foreign_marker / MARKER, *_foreign_uid())
        others = _victim(root_dir, f"{PREFIX}others")
        _marker(others, *dead_owner)
        os.chown(others, *_foreign_uid())
        planted.append(others)
    else:
        (foreign_marker / MARKER).chmod(0o666)  # others may write it: not trusted either
    assert sweep_orphans() is None
    assert sleeper.poll() is None
    assert all((p / "precious.txt").exists() for p in planted)
    # The real thing: the lab's marker, owner gone, its recorded process still running.
    orphan = root_dir / f"{PREFIX}orphan"
    (orphan / "srv").mkdir(parents=True)
    _marker(orphan, *dead_owner)
    exe = os.path.realpath(os.readlink(f"/proc/{sleeper.pid}/exe"))
    (orphan / PROCS).write_text(json.dumps({**record, "exe": exe, "sig": 15}) + "\n")
    line = sweep_orphans()
    assert line is not None and f"sleep pid {sleeper.pid}" in line
    assert_gone([sleeper.pid])
    assert not orphan.exists() and all((p / "precious.txt").exists() for p in planted)


NOBODY_CHECK = """
import json, os, sys
from pathlib import Path
from lab.servers import servers_down
from lab.procs.lifecycle import sweep_orphans
print(json.dumps({"down": servers_down(), "sweep": sweep_orphans(), "uid": os.geteuid()}))
"""


def test_planted_files_as_a_normal_user(tmp_path: Path) -> None:
    """The same checks when the lab runs as a normal user (nobody, via setpriv): a state
    folder root planted is left alone; of the user's own folders, which it could remove,
    only the one carrying the lab's marker goes, and the `sleep` it could signal, named
    there with another start time, is not signalled."""
    if os.geteuid() != 0:
        pytest.skip(
            "needs root to switch to another user (as a normal user the tests above are this)"
        )
    uid, gid = _foreign_uid()
    root = Path(tempfile.mkdtemp(prefix="locklab-test-", dir="/tmp"))  # nobody can enter
    try:
        root.chmod(0o755)
        os.chown(root, uid, gid)  # the user's TMPDIR (tempfile skips one it cannot write)
        planted = root / f"locklab-state-{uid}"  # root's, not nobody's
        planted.mkdir(mode=0o700)
        victim = _victim(root, f"{PREFIX}victim")
        marked = _victim(root, f"{PREFIX}marked")
        sleep = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "sleep", "300"])  # fmt: skip
        try:
            time.sleep(0.2)  # time is not the subject: let setpriv exec sleep
            marker = {
                "lab": "locklab",
                "owner_pid": _dead_pid(),
                "owner_start": 0,
                "uid": uid,
                "kept": False,
            }
            (marked / MARKER).write_text(json.dumps(marker))
            wrong = {"pid": sleep.pid, "start": 1, "exe": "/usr/bin/sleep", "sig": 15}
            (marked / PROCS).write_text(json.dumps(wrong) + "\n")
            for path in (victim, victim / "precious.txt", marked, marked / MARKER, marked / PROCS):
                os.chown(path, uid, gid)
            (planted / "servers.json").write_text(json.dumps(_state(victim, sleep.pid)))
            env = {**os.environ, "TMPDIR": str(root), "HOME": str(root)}
            proc = subprocess.run(
                ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                 sys.executable, "-c", NOBODY_CHECK],
                capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            out = json.loads(proc.stdout)
            assert out["uid"] == uid and out["down"] == []
            assert "no process was left" in out["sweep"]
            assert f"locklab-state-{uid} is owned by uid 0" in proc.stderr
            assert sleep.poll() is None
            assert (victim / "precious.txt").exists() and not marked.exists()
        finally:
            sleep.kill()
            sleep.wait()
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _dead_pid() -> int:
    """The PID of a process that has exited (and was reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# --- nothing outlives the lab ----------------------------------------------------------

HOLDER = """
import sys, time
from lab.servers import open_servers
srv = open_servers(mode="embedded", need_pgbouncer=True)
print(srv.pg.pid, srv.redis.pid, flush=True)
time.sleep(600)  # killed by the test
"""


def _start_holder() -> tuple[subprocess.Popen[str], list[int]]:
    """A lab process holding embedded PostgreSQL, Redis and PgBouncer."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the lab process did not start its servers"
    mine = [p for p, _ in lab_processes() if _owned_by(p, proc.pid)]
    assert len(mine) >= 4, mine  # postmaster (+ its processes), redis, two pgbouncers
    return proc, mine


def _owned_by(pid: int, owner: int) -> bool:
    """Whether `pid` works in a lab folder whose marker names `owner`."""
    for folder, marker in lifecycle.lab_folders():
        if marker["owner_pid"] == owner and procs.points_into(pid, folder):
            return True
    return False


def test_sigkill_of_the_lab_takes_its_servers_along() -> None:
    """kill -9 of a lab process: its reaper stops PostgreSQL (daemonised by pg_ctl, and
    its backends), Redis and PgBouncer, and removes their folders."""
    proc, pids = _start_holder()
    folders = [f for f, m in lifecycle.lab_folders() if m["owner_pid"] == proc.pid]
    proc.kill()
    proc.wait()
    assert_gone(pids, wait_s=20)
    deadline = time.monotonic() + 10
    while any(f.exists() for f in folders) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert folders and not any(f.exists() for f in folders)


def _is_reaper(args: str, owner: int) -> bool:
    """The reaper's command line: lifecycle.main() run by `python -I -c` (lifecycle.REAPER)
    with `reap OWNER_PID OWNER_START`."""
    return "lab.procs.lifecycle" in args and f" reap {owner} " in args


def test_the_next_command_stops_what_a_dead_lab_and_reaper_left(tmp_path: Path) -> None:
    """The lab and its reaper both SIGKILLed: the servers stay up, and the next lab
    command stops them, saying so in one line."""
    proc, pids = _start_holder()
    reapers = [p for p, args in _children(proc.pid) if _is_reaper(args, proc.pid)]
    assert reapers, "no reaper watches the lab process"
    for p in reapers:
        os.kill(p, signal.SIGKILL)
    proc.kill()
    proc.wait()
    time.sleep(0.5)  # time is the subject: a reaper that survived would act by now
    assert any(lifecycle.alive(p) for p in pids), "the servers died without a sweep"
    nxt = locklab("servers", "status", results=tmp_path)
    assert nxt.returncode == 0, nxt.stderr
    lines = [x for x in nxt.stderr.splitlines() if "earlier lab run" in x]
    assert len(lines) == 1 and "postgres pid" in lines[0] and "redis-server pid" in lines[0]
    assert_gone(pids)


# --- server faults named -----------------------------------------------------------------


def _sockets(pid: int) -> int:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    n = 0
    for fd in fds:
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return n


def _fault_run(tmp_path: Path, args: list[str], target: str, sig: int, sockets: int) -> tuple[subprocess.Popen[str], str, float]:  # fmt: skip
    """Run `locklab run *args` on its own embedded servers; once the lab holds `sockets`
    sockets (its actors are connected: mid-run), send `sig` to every process of the server
    whose command line contains `target`. Returns the process, its stderr, seconds from
    the signal to its exit."""
    env = {**os.environ, "LOCKLAB_RESULTS": str(tmp_path / "results"),
           "LOCKLAB_SERVERS": "embedded", "NO_COLOR": "1"}  # fmt: skip
    errfile = tmp_path / "stderr.txt"
    with open(errfile, "w") as errout:
        proc = subprocess.Popen([*LAB, *args], stdout=subprocess.DEVNULL, stderr=errout, text=True, env=env, cwd=ROOT)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while _sockets(proc.pid) < sockets:
            assert proc.poll() is None, errfile.read_text()
            assert time.monotonic() < deadline, "the run never got its actors connected"
            time.sleep(0.02)
        victims = [p for p, cmd in lab_processes() if _owned_by(p, proc.pid) and target in cmd]
        main = victims[0]
        victims += [p for p, _ in _children(main)]  # PostgreSQL's backends
        for p in victims:
            with contextlib.suppress(ProcessLookupError):  # a backend that just ended
                os.kill(p, sig)
        signalled = time.monotonic()
        proc.wait(timeout=60)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    return proc, errfile.read_text(), took


def _assert_named(proc: subprocess.Popen[str], stderr: str, pattern: str, tmp_path: Path) -> None:
    assert proc.returncode == 3, stderr
    assert not any(e in stderr for e in ECHOES), stderr
    assert re.match(pattern, stderr.strip().splitlines()[-1]), stderr
    assert not list((tmp_path / "results").rglob("*.json")), "a failed run left a record"
    assert [p for p, _ in lab_processes() if _owned_by(p, proc.pid)] == []


def test_postgres_killed_mid_run_is_named(tmp_path: Path) -> None:
    """SIGKILL of the postmaster during money-transfer: one line naming it, exit 3."""
    args = ["run", "money-transfer", "-v", "buggy", "-n", "40"]
    proc, stderr, _ = _fault_run(tmp_path, args, "pgdata", signal.SIGKILL, 40)
    during = "money-transfer / buggy"
    _assert_named(proc, stderr, FAULT_LINE.format(product="PostgreSQL", what="went away", during=during), tmp_path)  # fmt: skip


def test_redis_killed_mid_stampede_is_named(tmp_path: Path) -> None:
    """SIGKILL of Redis under 2,000 waiters (cache-stampede): one line, no task traceback."""
    # pooled in the lab's own process: a connection per waiter, so 500 open sockets say
    # the waiters are polling
    args = ["run", "cache-stampede", "-v", "buggy", "-n", "2000", "--redis-client", "pooled"]
    args += ["--procs", "1"]
    args += LONG_STAMPEDE
    proc, stderr, _ = _fault_run(tmp_path, args, "redis-server", signal.SIGKILL, 500)
    during = "cache-stampede / buggy"
    _assert_named(proc, stderr, FAULT_LINE.format(product="Redis", what="went away", during=during), tmp_path)  # fmt: skip


def test_a_stopped_postgres_is_cut_and_torn_down_in_bounded_time(tmp_path: Path) -> None:
    """SIGSTOP of the postmaster and its backends mid-run: the run ends (named: stopped
    answering), teardown kills the stopped server, all within a bounded time."""
    args = ["run", "money-transfer", "-v", "buggy", "-n", "40"]
    proc, stderr, took = _fault_run(tmp_path, args, "pgdata", signal.SIGSTOP, 40)
    during = "money-transfer / buggy"
    what = r"stopped answering \(its process is stopped\)"
    _assert_named(proc, stderr, FAULT_LINE.format(product="PostgreSQL", what=what, during=during), tmp_path)  # fmt: skip
    assert took < 30, f"{took:.1f} s from SIGSTOP to exit"


# --- limits and privileges ---------------------------------------------------------------


def test_too_few_open_files_for_n_is_refused_up_front(servers: Servers, tmp_path: Path) -> None:
    """-n needing more sockets than RLIMIT_NOFILE's hard limit: one line naming it, exit 2,
    before a database is created."""
    assert servers.pg is not None

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    env = {**os.environ, "LOCKLAB_RESULTS": str(tmp_path), "NO_COLOR": "1"}
    proc = subprocess.run(
        [*LAB, "run", "checkout-deadlock", "-v", "fixed", "-n", "400", "--pg-dsn", servers.pg.dsn],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, preexec_fn=low_limit,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert re.match(r"locklab: -n 400 needs about \d+ open files .* RLIMIT_NOFILE allows 256", last)
    assert "Traceback" not in proc.stderr and not list(tmp_path.rglob("*.json"))


def test_redis_and_pgbouncer_never_run_as_root(servers: Servers) -> None:
    """When the lab is root, Redis and PgBouncer run as the unprivileged server user, and
    no server's command line carries a password."""
    if os.geteuid() != 0:
        pytest.skip("the lab is not root: nothing to drop")
    if servers.redis is None or not servers.redis.pid:
        pytest.skip("not an embedded Redis")
    assert os.stat(f"/proc/{servers.redis.pid}").st_uid != 0
    mine = [p for p, cmd in lab_processes() if _owned_by(p, os.getpid())]
    bouncers = [p for p in mine if "pgbouncer" in procs.proc_cmdline(p)]
    if servers.pgbouncer_info is not None and servers.pgbouncer_info.kind == "embedded":
        assert bouncers
    assert all(os.stat(f"/proc/{p}").st_uid != 0 for p in mine)
    secrets = [servers.redis.url.split(":")[2].split("@")[0]]
    assert not any(s in procs.proc_cmdline(p) for p in mine for s in secrets)


def test_a_reused_pid_is_never_signalled(sleeper: subprocess.Popen[bytes]) -> None:
    """stop_pid / kill_tree on a PID the lab registered whose process is now another one
    (another start time: the kernel reused the PID) do nothing."""
    from lab.procs.lifecycle import kill_tree, stop_pid

    lifecycle._started[sleeper.pid] = 1  # as if the lab's process with this PID had ended
    try:
        stop_pid(sleeper.pid, wait=0.5)
        kill_tree(sleeper.pid)
        assert sleeper.poll() is None
    finally:
        del lifecycle._started[sleeper.pid]
