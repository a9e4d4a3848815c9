"""lab.procs.forkserver: workers forked from a template process keep lab.procs.workers' protocol and lifetime."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.aio import until
from lab.procs import forkserver, lifecycle
from lab.procs.workers import Worker, WorkerError

DATA = Path(__file__).parent / "data" / "workers"
PROBE = DATA / "fork_probe.py"
GONE_S = 10.0  # a SIGKILLed process is gone well within this


def ppid_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def my_folders() -> set[Path]:
    """The lab folders this test process owns (other labs on the machine come and go)."""
    return {f for f, m in lifecycle.lab_folders() if m.get("owner_pid") == os.getpid()}


async def test_a_forked_worker_runs_its_script_as_python_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forked: its parent is the fork server (the lab's child, also recorded in the worker's
    folder), argv[1] is the server's PID, it runs as __main__ from the script's folder, in
    its own session and lab folder, with the lab's environment of the moment, and a Ctrl-C
    raises KeyboardInterrupt in it as in a fresh python (the server ignores SIGINT); its
    garbage collector runs (the server's is off)."""
    monkeypatch.setenv("FORK_PROBE", "set after the server started")
    w = await Worker.spawn(PROBE, {}, name="probe", fork=True)
    try:
        probe = (await w.wait_for("probe")).fields
        server = probe["ppid"]
        assert server != os.getpid() and ppid_of(server) == os.getpid()
        assert probe["argv"] == [str(server)] and probe["name"] == "__main__"
        assert probe["path0"] == str(DATA) and probe["cwd"] == str(w.folder) and probe["sid"]
        assert probe["env"] == "set after the server started" and probe["sigint"]
        assert probe["gc"]
        assert w.folder is not None
        assert {w.pid, server} <= set(lifecycle.folder_processes(w.folder))
        w.grant("end")
        assert (await w.wait_for("returned")).fields["result"] == "ok"
        assert await w.proc.wait() == 0
    finally:
        await w.close()
    assert forkserver.fallbacks == 0


async def test_forks_share_the_server_and_not_their_random_state() -> None:
    """Two forks come from one server; each reseeds `random` (Python does at fork)."""
    ws = [await Worker.spawn(PROBE, {}, name=f"p{i}", fork=True) for i in range(2)]
    try:
        a, b = [(await w.wait_for("probe")).fields for w in ws]
        assert a["ppid"] == b["ppid"] and a["rand"] != b["rand"]
    finally:
        for w in ws:
            await w.close()


async def test_exit_status_and_signals_come_through() -> None:
    """A forked child's own exit status and a SIGKILL reach `wait` as asyncio reports them."""
    w = await Worker.spawn(PROBE, {"exit": 4}, name="exit4", fork=True)
    try:
        w.grant("end")
        assert await w.proc.wait() == 4
    finally:
        await w.close()
    w = await Worker.spawn(PROBE, {}, name="killed", fork=True)
    try:
        await w.wait_for("step")
        await w.pause()
        assert await w.kill() == -9 and not lifecycle.alive(w.pid)
    finally:
        await w.close()


async def test_a_forked_worker_that_cannot_start_leaves_nothing(tmp_path: Path) -> None:
    """A script that dies before `ready`: one named error with its stderr, no lab folder."""
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.stderr.write('no such module: x\\n')\nsys.exit(3)\n")
    before = my_folders()
    with pytest.raises(WorkerError, match=r"ended before 'ready' .*exit 3; stderr: no such"):
        await Worker.spawn(bad, {}, name="bad", fork=True)
    assert my_folders() == before


async def test_the_children_die_with_the_server_and_a_new_one_serves() -> None:
    """SIGKILL the server: its child dies with it (its death signal), the lab sees the exit,
    and the next fork starts a new server."""
    w = await Worker.spawn(PROBE, {}, name="orphan", fork=True)
    try:
        server = (await w.wait_for("probe")).fields["ppid"]
        os.kill(server, 9)
        assert (await w.wait_for("exit")).name == "exit"
        await until(lambda: not lifecycle.alive(w.pid), GONE_S, "the orphan to be gone")
        assert await w.proc.wait() == -9
    finally:
        await w.close()
    w = await Worker.spawn(PROBE, {}, name="next", fork=True)
    try:
        assert (await w.wait_for("probe")).fields["ppid"] not in (server, os.getpid())
    finally:
        await w.close()


async def test_the_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """LOCKLAB_FORK_SERVER=0: a fresh interpreter, the lab its parent."""
    monkeypatch.setenv(forkserver.ENV, "0")
    w = await Worker.spawn(PROBE, {}, name="exec", fork=True)
    try:
        probe = (await w.wait_for("probe")).fields
        assert probe["ppid"] == os.getpid() and probe["argv"] == [str(os.getpid())]
    finally:
        await w.close()
