"""lab.procs.workers on real child processes: config in, grants, stamped events, faults, lifetime."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import lab.procs as procs
from lab.procs import lifecycle
from lab.procs.workers import Event, Worker, WorkerError, next_of, proc_state

DATA = Path(__file__).parent / "data" / "workers"
ECHO = DATA / "echo_worker.py"
GONE_S = 10.0  # a SIGKILLed process is reaped by the kernel well within this


@pytest.fixture(params=[False, True], ids=["exec", "fork"])
async def echo(request: pytest.FixtureRequest) -> AsyncIterator[Worker]:
    """The echo worker, a fresh interpreter or forked by the fork server: the same protocol."""
    seen: list[Event] = []
    w = await Worker.spawn(ECHO, {"who": "A"}, name="A", on_event=seen.append, fork=request.param)
    try:
        yield w
    finally:
        await w.close()
    assert [e.name for e in seen] == [e.name for e in w.events]  # the callback saw each one


def gone_within(pid: int, seconds: float) -> bool:
    """Whether `pid` is no longer a live process within `seconds` (polled: time is the bound)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not lifecycle.alive(pid):
            return True
        time.sleep(0.02)
    return False


async def test_config_in_events_out_on_the_labs_clock() -> None:
    """The config reaches the child; its events carry the child's clock, which lies between
    the lab's own readings before the spawn and after the event arrived."""
    before = time.perf_counter()
    w = await Worker.spawn(ECHO, {"who": "B"}, name="B")
    try:
        hello = await w.wait_for("hello")
        after = time.perf_counter()
        assert hello.fields == {"who": "B"}
        assert before < w.events[0].t <= hello.t < after
        assert w.events[0].name == "ready" and w.events[0].fields["pid"] == w.pid
    finally:
        await w.close()


async def test_a_step_runs_only_when_granted(echo: Worker) -> None:
    """The child waits at its step until the grant; what it does next is stamped after it."""
    assert (await echo.wait_for("step")).fields == {"step": "go"}
    granted = time.perf_counter()
    echo.grant("go")
    assert (await echo.wait_for("went")).t > granted
    assert (await echo.wait_for("step")).fields == {"step": "end"}
    echo.grant("end")
    assert [(await echo.next()).name, (await echo.next()).name] == ["returned", "exit"]


async def test_next_streams_events_in_order(echo: Worker) -> None:
    """next() returns every event once, in order, passing over the names it is told to skip."""
    assert (await echo.next()).name == "hello"  # "ready" was taken by spawn
    echo.grant("go")
    assert (await echo.next(skip=("step",))).name == "went"
    echo.grant("end")
    assert (await echo.next(skip=("step",))).fields == {"result": "A"}


async def test_pause_freezes_until_resume(echo: Worker) -> None:
    """SIGSTOP: the kernel reports 'T' and a grant sent meanwhile is acted on only after
    SIGCONT (the child's stamp of what follows is later than the resume)."""
    await echo.wait_for("step")
    assert await echo.pause() in ("T", "t")
    echo.grant("go")
    assert proc_state(echo.pid) in ("T", "t")
    resumed = time.perf_counter()
    echo.resume()
    assert (await echo.wait_for("went")).t > resumed


async def test_kill_ends_a_paused_worker_and_waits_fail_loudly(echo: Worker) -> None:
    """SIGKILL ends even a stopped worker; a wait for what it will never write, or a grant
    it will never read, fails naming it."""
    await echo.wait_for("step")
    await echo.pause()
    assert await echo.kill() == -signal.SIGKILL
    with pytest.raises(WorkerError, match=r"worker A ended before 'returned' .*signal 9"):
        await echo.wait_for("returned", 5)
    assert echo.killed and echo.events[-1].name == "exit"
    with pytest.raises(WorkerError, match=r"cannot send the grant of 'go': pid \d+, signal 9"):
        echo.grant("go")


async def test_a_child_error_is_named() -> None:
    """An exception in the worker's code fails the wait, with the worker's own message."""
    w = await Worker.spawn(ECHO, {"who": "A", "fail": True}, name="A")
    try:
        await w.wait_for("step")
        w.grant("go")
        with pytest.raises(WorkerError, match="worker A failed before 'went': ValueError"):
            await w.wait_for("went")
    finally:
        await w.close()


async def test_a_wrong_grant_is_an_error(echo: Worker) -> None:
    """A grant for another step than the one the child waits at fails it, named."""
    await echo.wait_for("step")
    echo.grant("end")
    with pytest.raises(WorkerError, match="waiting at step 'go', granted 'end'"):
        await echo.wait_for("went")


async def test_a_wait_is_bounded(echo: Worker) -> None:
    """A wait for an event that does not come ends after its bound, naming the worker."""
    await echo.wait_for("step")
    with pytest.raises(WorkerError, match=r"worker A: no 'went' within 0.2 s \(pid \d+, running"):
        await echo.wait_for("went", 0.2)


async def test_next_of_merges_workers_in_the_order_they_wrote() -> None:
    """next_of returns each event of several workers once, whose it is, the one written
    first among those that arrived; an ended worker's exit, then it is passed over; with
    every worker ended, or nothing coming, it fails naming them."""
    a = await Worker.spawn(ECHO, {"who": "A"}, name="A")
    b = await Worker.spawn(ECHO, {"who": "B"}, name="B")
    try:
        both, skip = [a, b], ("step", "returned")
        (w1, e1), (w2, e2) = await next_of(both, skip=skip), await next_of(both, skip=skip)
        assert {(w1.name, e1.name), (w2.name, e2.name)} == {("A", "hello"), ("B", "hello")}
        assert e1.t <= e2.t
        b.grant("go")
        got = await next_of(both, skip=skip)
        assert (got[0], got[1].name) == (b, "went")
        a.grant("go")
        got = await next_of(both, skip=skip)
        assert (got[0], got[1].name) == (a, "went")
        await b.kill()
        got = await next_of(both, skip=skip)
        assert (got[0], got[1].name) == (b, "exit")
        with pytest.raises(WorkerError, match=r"workers A, B: no event within 0.2 s"):
            await next_of(both, 0.2, skip=skip)  # A waits at its step; B is gone
        a.grant("end")
        assert (await next_of(both, skip=skip))[1].name == "exit"
        with pytest.raises(WorkerError, match="workers A, B all ended before an event"):
            await next_of(both, skip=skip)
    finally:
        await a.close()
        await b.close()


async def test_next_of_passes_a_childs_error_on() -> None:
    """A child's error is an event like any other (as next() returns it), named by whose it
    is; told to skip it, next_of fails naming the worker and its message."""
    workers = [await Worker.spawn(ECHO, {"who": w, "fail": w != "A"}, name=w) for w in "AFG"]
    a, f, g = workers
    try:
        for w in (f, g):
            await w.wait_for("step")
            w.grant("go")
        w, ev = await next_of([a, f], skip=("step", "hello"))
        assert (w, ev.name, ev.fields["error"]) == (
            f,
            "error",
            "ValueError: asked to fail (at main)",
        )
        with pytest.raises(WorkerError, match="worker G failed before an event: ValueError"):
            await next_of([a, g], skip=("step", "hello", "error"))
    finally:
        for w in workers:
            await w.close()


async def test_a_worker_that_cannot_start_leaves_nothing(tmp_path: Path) -> None:
    """A script that dies before `ready`: one named error, no process, no lab folder."""
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.stderr.write('no such module: x\\n')\nsys.exit(3)\n")
    before = my_folders()
    with pytest.raises(WorkerError, match=r"ended before 'ready' .*exit 3; stderr: no such"):
        await Worker.spawn(bad, {}, name="bad")
    assert my_folders() == before


def my_folders() -> set[Path]:
    """The lab folders this test process owns (other labs on the machine come and go)."""
    return {f for f, m in lifecycle.lab_folders() if m.get("owner_pid") == os.getpid()}


async def test_close_stops_it_and_removes_its_folder(echo: Worker) -> None:
    """The worker is recorded in its lab folder (what the reaper reads); close ends both."""
    folder = echo.folder
    assert folder is not None and echo.pid in lifecycle.folder_processes(folder)
    assert procs.proc_cwd(echo.pid) == str(folder)
    await echo.close()
    assert not lifecycle.alive(echo.pid) and not folder.exists()


@pytest.mark.parametrize("how", ["exec", "fork"])
def test_the_child_dies_with_a_killed_lab(how: str) -> None:
    """SIGKILL the lab while its worker is stopped: the worker dies too (a forked one with
    its fork server), and its folder goes."""
    lab = subprocess.Popen(
        [sys.executable, str(DATA / "lab_parent.py"), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert lab.stdout is not None
        line = lab.stdout.readline()
        assert line, lab.stderr.read() if lab.stderr else ""
        pid, folder, parent = int(line.split()[0]), Path(line.split()[1]), int(line.split()[2])
        assert proc_state(pid) in ("T", "t")
        assert (parent == lab.pid) == (how == "exec")  # forked: the server is its parent
        os.kill(lab.pid, signal.SIGKILL)
        lab.wait(GONE_S)
        assert gone_within(pid, GONE_S) and gone_within(parent, GONE_S)
        deadline = time.monotonic() + GONE_S  # the reaper removes the folder after
        while folder.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not folder.exists()
    finally:
        if lab.poll() is None:
            lab.kill()
            lab.wait()


async def test_several_grants_go_in_one_write(
    echo: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """grant(step, n) is one write of n lines: a child that takes one and exits (cron-rerun's
    pod-2 that skips) cannot close the pipe between two writes while the lab is preempted,
    which made a later write fail (seen beside a busy core). The child takes what it needs."""
    await echo.wait_for("hello")
    assert echo.proc.stdin is not None
    writes: list[bytes] = []
    real = echo.proc.stdin.write

    def counted(data: bytes) -> None:
        writes.append(data)
        real(data)

    monkeypatch.setattr(echo.proc.stdin, "write", counted)
    echo.grant("go")
    await echo.wait_for("went")
    echo.grant("end", 3)  # it takes one and exits
    assert (await echo.wait_for("returned")).fields == {"result": "A"}
    assert [w.count(b"\n") for w in writes] == [1, 3]
    assert await echo.proc.wait() == 0
