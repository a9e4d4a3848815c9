"""A template process that forks the lab's worker processes with their imports done.

A worker script costs a fresh interpreter: 0.15-0.3 CPU-s, most of it importing asyncio,
asyncpg and redis, before it reads its config (``python -X importtime``; docs/load.md). The
fork server pays that once per lab thread: it is started at the first ``Worker.spawn(...,
fork=True)``, imports what the requests name, and forks a child per request, which runs
the script as ``python script ARGS`` would (``runpy``, ``__name__ == "__main__"``, the
script's folder first on ``sys.path``, the lab's environment at the time of the request,
its own session and working folder, stdin, stdout and stderr the lab's pipes).

The protocol. The lab holds one end of a Unix SOCK_SEQPACKET pair, the server the other
(its fd given in argv). A request is one message: a JSON object (script, args, cwd, env,
preload) with four file descriptors: the child's stdin, stdout and stderr, and the write
end of a status pipe, on which the server writes ``pid N`` once it forked, then ``exit
CODE`` (asyncio's returncode: negative for a signal) once it reaped the child, or ``error
TEXT`` instead of both. The lab reads the status pipe in whatever event loop spawned the
worker, so one server serves every loop of its thread.

Lifetime: the guarantees of lab/procs/workers.py hold. The server asks for PR_SET_PDEATHSIG
(SIGKILL) on the lab, exits when the lab's end of the socket closes, and is recorded in
every live child's lab folder, so the reaper and the next command's sweep stop it too.
Each child sets PR_SET_PDEATHSIG on the server (run_child: the server's PID is its argv[1]),
so the chain lab -> server -> child ends every child with the lab. The lab signals a child
by its PID, only while /proc shows the process it recorded (lifecycle.still_ours).
``LOCKLAB_FORK_SERVER=0`` makes every worker a fresh interpreter again.

The server starts no thread and no event loop, so a child starts from a quiet process; it
imports what the requests name (each module once), keeps its garbage collector off and
freezes what it holds at each fork (gc.freeze), so a child neither scans nor copies it.
Its own output goes nowhere: what goes wrong with a request goes to that request's
status pipe, and the lab starts the worker as a fresh interpreter instead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

ENV = "LOCKLAB_FORK_SERVER"  # "0": no fork server, every worker execs a fresh interpreter
MAX_REQUEST = 1 << 20  # bytes of one request (its environment is most of it)
TITLE_ROOM = 1024  # bytes of command line the server keeps for its children's (see _retitle)
BASE_PRELOAD = ("asyncio", "json", "ctypes", "lab.procs.workers")  # what every worker script uses
# what the lab's worker scripts import besides (a script importing less loses nothing: the
# server imports these once, the forks share them)
PRELOAD = (
    "asyncpg",
    "redis.asyncio",
    "redis.asyncio.retry",
    "redis.backoff",
    "lab.kit.redislock",
    "lab.core.steps",
    "lab.core.scenario",
)
fallbacks = 0  # workers that got a fresh interpreter because the server could not fork them


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


# --- the lab's side ------------------------------------------------------------------------


class _Server:
    """The lab's handle on one fork server: the process and the lab's end of the socket."""

    def __init__(self) -> None:
        lab_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            room = "." * TITLE_ROOM  # the server gives it back at once (_retitle)
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lab.procs.forkserver",
                    str(os.getpid()),
                    str(server_end.fileno()),
                    room,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(server_end.fileno(),),
                start_new_session=True,  # a Ctrl-C is the lab's to handle, not the server's
            )
        except BaseException:
            lab_end.close()
            raise
        finally:
            server_end.close()
        self.sock = lab_end
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, req: Mapping[str, Any], fds: Sequence[int]) -> None:
        self.sock.settimeout(5.0)  # a full socket buffer means the server is stuck
        socket.send_fds(self.sock, [json.dumps(req).encode()], list(fds))

    def close(self) -> None:
        """Close the lab's end (the server exits at EOF) and reap it."""
        self.sock.close()
        try:
            self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_servers: dict[tuple[int, int], _Server] = {}  # (lab pid, thread id) -> its server
_lock = threading.Lock()


def server() -> _Server:
    """This thread's fork server, started now if it has none or it died. Per thread: a
    death signal fires when the *thread* that started the process ends."""
    key = (os.getpid(), threading.get_ident())
    with _lock:
        s = _servers.get(key)
        if s is None or not s.alive():
            if s is not None:
                s.close()
            s = _servers[key] = _Server()
        return s


@atexit.register
def _close_all() -> None:
    """At the lab's exit: close this process's servers (each exits at EOF) and reap them."""
    for key, s in list(_servers.items()):
        if key[0] == os.getpid():
            with contextlib.suppress(Exception):
                s.close()
    _servers.clear()


class _Status(asyncio.Protocol):
    """The status pipe of one forked child: its PID, then its exit status."""

    def __init__(self, child: Forked) -> None:
        self.child, self.buf = child, b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\n" in self.buf:
            line, _, self.buf = self.buf.partition(b"\n")
            word, _, rest = line.decode(errors="replace").partition(" ")
            if word == "pid":
                self.child._started(int(rest))
            elif word == "exit":
                self.child._exited(int(rest))
            else:
                self.child._failed(f"the fork server could not start it: {rest}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.child._server_gone()


class Forked:
    """A worker process forked by the fork server, seen from the lab: what lab/procs/workers.py
    uses of asyncio.subprocess.Process (pid, returncode, the pipes, wait, kill)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._pid: asyncio.Future[int] = loop.create_future()
        self._exit: asyncio.Future[int] = loop.create_future()
        self.pid = 0
        self.returncode: int | None = None
        self.stdin: asyncio.WriteTransport | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._transports: list[asyncio.BaseTransport] = []

    def _started(self, pid: int) -> None:
        if not self._pid.done():
            self._pid.set_result(pid)

    def _exited(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
        if not self._exit.done():
            self._exit.set_result(self.returncode)

    def _failed(self, why: str) -> None:
        if not self._pid.done():
            self._pid.set_exception(OSError(why))

    def _server_gone(self) -> None:
        """The status pipe closed without an exit status: the server died, and the child
        with it (its death signal); SIGKILL it still, should it be alive and ours."""
        self._failed("the fork server ended")
        if self.returncode is None and self.pid:
            from lab.procs import lifecycle

            if lifecycle.still_ours(self.pid) and lifecycle.alive(self.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
            self._exited(-signal.SIGKILL)

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    def send_signal(self, sig: int) -> None:
        """`sig` to the child by its PID, while it runs and is still the process started."""
        from lab.procs import lifecycle

        if self.returncode is None and lifecycle.still_ours(self.pid):
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        """Close the lab's ends of the pipes (after the child ended)."""
        for t in self._transports:
            t.close()


async def start(
    script: str, cwd: str, preload: Sequence[str] = (), limit: int = 2**16, *, module: bool = False
) -> tuple[Forked, int]:
    """Fork ``python script SERVER_PID`` in `cwd` (run_child's argv: the PID of the parent
    its death signal follows), or with `module` ``python -m script``; (the child, that
    PID). `limit`: of its stdout's and stderr's lines. OSError when the server cannot."""
    loop = asyncio.get_running_loop()
    srv = server()
    child = Forked(loop)
    pipes = [os.pipe2(os.O_CLOEXEC) for _ in range(4)]  # stdin, stdout, stderr, status
    theirs = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1]]
    ours = [pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0]]
    try:
        req = {
            "script": script,
            "module": module,
            "args": [] if module else [str(srv.pid)],
            "cwd": cwd,
            "env": dict(os.environ),
            "preload": [*BASE_PRELOAD, *PRELOAD, *preload],
        }
        srv.request(req, theirs)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    try:
        t, _ = await loop.connect_read_pipe(lambda: _Status(child), os.fdopen(ours[3], "rb", 0))
        child._transports.append(t)
        for fd, attr in ((ours[1], "stdout"), (ours[2], "stderr")):
            reader = asyncio.StreamReader(limit=limit)
            proto = functools.partial(asyncio.StreamReaderProtocol, reader)
            t, _ = await loop.connect_read_pipe(proto, os.fdopen(fd, "rb", 0))
            child._transports.append(t)
            setattr(child, attr, reader)
        w, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(ours[0], "wb", 0))
        child._transports.append(w)
        child.stdin = w
        child.pid = await child._pid
    except BaseException:
        child.close()
        raise
    return child, srv.pid


# --- the server's side ---------------------------------------------------------------------


def _import(names: Sequence[str]) -> None:
    """Import `names` here, once (a child that needs one that fails imports it itself)."""
    for name in names:
        if name not in sys.modules:
            with contextlib.suppress(Exception):
                importlib.import_module(name)


def _retitle(argv: Sequence[str]) -> None:
    """Show `argv` as this process's command line (ps, /proc/PID/cmdline: a forked worker
    shows its script, as it would exec'd): written over the argv area the kernel reads,
    which the server's last argument made TITLE_ROOM bytes longer; NUL-padded."""
    with contextlib.suppress(Exception):
        import ctypes

        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)
        room = end - start
        title = "\0".join(argv).encode()[: room - 1]
        ctypes.memmove(start, title + b"\0" * (room - len(title)), room)


def _write(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):  # the lab closed its end: nobody is asking
        os.write(fd, (line + "\n").encode())


def _run_child(req: Mapping[str, Any], fds: Sequence[int]) -> None:
    """In the forked child: become ``python script args`` (``python -m script``) and never
    return."""
    import runpy

    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a fresh python's
        gc.enable()
        os.setsid()
        for target, fd in zip((0, 1, 2), fds[:3], strict=True):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        script = str(req["script"])
        sys.argv = [script, *req["args"]]
        _retitle([sys.executable, *(["-m"] if req.get("module") else []), *sys.argv])
        try:
            if req.get("module"):
                sys.path[0] = os.getcwd()
                runpy.run_module(script, run_name="__main__", alter_sys=True)
            else:
                sys.path[0] = os.path.dirname(script)
                runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                sys.stderr.write(f"{exc.code}\n")
        except BaseException:
            traceback.print_exc()
        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                f.flush()
    finally:
        os._exit(code)


def serve(lab_pid: int, ctl_fd: int) -> None:
    """The server: fork a child per request, report each child's PID and exit status, and
    exit when the lab's end of the socket closes."""
    from lab.procs import die_with_parent

    die_with_parent(lab_pid)
    _retitle([sys.executable, "-m", "lab.procs.forkserver", str(lab_pid), str(ctl_fd)])
    ctl = socket.socket(fileno=ctl_fd)
    wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # its own session: only the lab ends it
    gc.disable()  # until each fork: the imports' objects stay put (gc.freeze, in _fork)
    _import(BASE_PRELOAD)
    status: dict[int, int] = {}  # child pid -> write end of its status pipe
    sel = selectors.DefaultSelector()
    sel.register(ctl, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is ctl:
                msg, fds, _, _ = socket.recv_fds(ctl, MAX_REQUEST, 4)
                if not msg:
                    return  # the lab is gone
                _fork(json.loads(msg), fds, status)
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                _reap(status)


def _fork(req: Mapping[str, Any], fds: list[int], status: dict[int, int]) -> None:
    if len(fds) != 4:
        for fd in fds:
            os.close(fd)
        return
    try:
        _import(req.get("preload", ()))
        gc.freeze()  # what the child inherits is never scanned there: no copy-on-write for it
        pid = os.fork()
    except BaseException as exc:
        _write(fds[3], f"error {type(exc).__name__}: {exc}")
        for fd in fds:
            os.close(fd)
        return
    if pid == 0:
        _run_child(req, fds)
    status[pid] = fds[3]
    _write(fds[3], f"pid {pid}")
    for fd in fds[:3]:
        os.close(fd)


def _reap(status: dict[int, int]) -> None:
    """Reap every child that ended; tell the lab its exit status (stops are not reported)."""
    while True:
        try:
            pid, how = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = status.pop(pid, None)
        if fd is not None:
            _write(fd, f"exit {os.waitstatus_to_exitcode(how)}")
            os.close(fd)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
