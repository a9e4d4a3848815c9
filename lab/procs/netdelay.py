"""A TCP delay proxy in its own process: adds half a round-trip time in each direction.

The documents ran Node against a PostgreSQL and a Redis reached over a network; the lab
runs on loopback (~0.05 ms). `--rtt pg:<ms>,redis:<ms>` puts one such proxy in front of
each server asked (lab.load.workload: the actors' PostgreSQL connections; lab.load.links: Redis and
PgBouncer's hop to PostgreSQL): every chunk read on one side is written to the other
`rtt/2` ms after it arrived, in order, so a request/response round trip costs `rtt`
more. Loopback only.

The child is started by `spawn()` (one small function, so it can move to the servers'
reaper helper): it dies with its parent (PR_SET_PDEATHSIG, checked against the PID it
was given) and is stopped by PID in the caller's `finally`.

Run as `python -m lab.procs.netdelay <upstream_port> <one_way_ms> <parent_pid>`: it prints the
port it listens on, then serves until killed. `Proxy.cut()` partitions it (SIGUSR1): from
then on nothing read on either side is passed on, though both connections stay open, as
when a network drops packets; the child says "cut" once it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import resource
import selectors
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import IO

from lab.errors import LabError
from lab.procs import die_with_parent

HOST = "127.0.0.1"
READY_TIMEOUT_S = 10.0
CHUNK = 65536
SERVERS = {"pg": "PostgreSQL", "redis": "Redis"}  # what --rtt can delay; a bare number: pg


def parse_rtt(spec: str) -> dict[str, float]:
    """`<ms>` | `pg:<ms>` | `redis:<ms>` | `pg:<ms>,redis:<ms>` -> server -> RTT in ms.

    A bare number is PostgreSQL's. "" means no proxy at all. Negative, non-numeric, nan
    and inf are refused, as are a server the lab cannot delay and one named twice."""
    if spec == "":
        return {}
    num = r"\d+(?:\.\d+)?"
    if re.fullmatch(num, spec.strip()):
        return {"pg": _finite(spec, spec)}
    out: dict[str, float] = {}
    for part in spec.split(","):
        name, sep, raw = part.strip().partition(":")
        if not sep:
            raise LabError(
                f"--rtt {spec!r}: expected milliseconds >= 0 (20: PostgreSQL's) or "
                "<server>:<ms> for pg and redis (pg:20,redis:5)"
            )
        if name not in SERVERS:
            raise LabError(f"--rtt {spec!r}: {name!r} is not a server the lab delays (pg, redis)")
        if name in out:
            raise LabError(f"--rtt {spec!r}: {name} is given twice")
        if not re.fullmatch(num, raw.strip()):
            raise LabError(f"--rtt {spec!r}: {name}: expected milliseconds >= 0")
        out[name] = _finite(spec, raw)
    return out


def _finite(spec: str, raw: str) -> float:
    value = float(raw)
    if not math.isfinite(value):
        raise LabError(f"--rtt {spec!r}: expected milliseconds >= 0")
    return value


# --- the parent's side --------------------------------------------------------------------


@dataclass
class Proxy:
    """A running delay proxy: where to connect instead of the server, and its PID."""

    pid: int
    port: int
    upstream_port: int
    rtt_ms: float
    said: IO[bytes] | None = None  # the child's stdout: its acknowledgements

    def cut(self) -> None:
        """Partition the link: what either side sends from now on is dropped. Returns once
        the child holds the cut (it acknowledges on its stdout)."""
        if self.said is None:
            raise LabError("delay proxy: no acknowledgement channel")
        os.kill(self.pid, signal.SIGUSR1)
        with selectors.DefaultSelector() as sel:
            sel.register(self.said, selectors.EVENT_READ)
            ready = sel.select(READY_TIMEOUT_S)
        if not ready or self.said.readline().strip() != b"cut":
            raise LabError("the delay proxy did not acknowledge the partition")

    def stop(self) -> None:
        stop_proxy(self.pid)
        if self.said is not None:
            self.said.close()


def spawn(upstream_port: int, rtt_ms: float) -> Proxy:
    """Start a proxy to 127.0.0.1:`upstream_port` adding `rtt_ms` per round trip.

    Called from the thread that stays alive for the run (PR_SET_PDEATHSIG fires when the
    *thread* that forked the child ends), i.e. the event loop's, never a worker thread."""
    args = [sys.executable, "-m", "lab.procs.netdelay", str(upstream_port), repr(rtt_ms / 2)]
    proc = subprocess.Popen(
        [*args, str(os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C reaches the lab, which stops it by PID
    )
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:  # poll/epoll: select() stops at fd 1024
            sel.register(proc.stdout, selectors.EVENT_READ)
            ready = sel.select(READY_TIMEOUT_S)
        line = proc.stdout.readline().decode().strip() if ready else ""
        if not line.isdigit():
            raise LabError(f"the --rtt delay proxy did not start (said {line!r})")
        return Proxy(proc.pid, int(line), upstream_port, rtt_ms, proc.stdout)
    except BaseException:
        stop_proxy(proc.pid)
        raise


def stop_proxy(pid: int) -> None:
    """Kill the proxy by PID and reap it (it holds no state worth a graceful stop)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


# --- the child's side ---------------------------------------------------------------------


def _die_with(parent: int) -> None:
    """SIGKILL this process when the parent ends; if it already ended, exit now."""
    die_with_parent(parent)
    with contextlib.suppress(OSError):  # where allowed, wake ahead of the load it delays
        os.nice(-5)


CUT = asyncio.Event()  # set by SIGUSR1: the link is partitioned, nothing more passes


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    """Copy reader -> writer, each chunk written `delay_s` after it was read, in order;
    once CUT, what is read is dropped (an EOF still passes: a dead peer closes)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        try:
            while chunk := await reader.read(CHUNK):
                if not CUT.is_set():
                    queue.put_nowait((loop.time() + delay_s, chunk))
        finally:  # EOF or a reset: the writer ends too, after what was already read
            queue.put_nowait((loop.time() + delay_s, b""))

    async def write() -> None:
        while True:
            due, chunk = await queue.get()
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            if not chunk:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(chunk)
            await writer.drain()

    reading = asyncio.create_task(read())
    try:
        await write()
    finally:
        reading.cancel()


async def _serve(upstream_port: int, delay_s: float) -> None:
    async def handle(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            u_reader, u_writer = await asyncio.open_connection(HOST, upstream_port)
        except OSError:
            c_writer.close()
            return
        for w in (c_writer, u_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.gather(
                _pump(c_reader, u_writer, delay_s),
                _pump(u_reader, c_writer, delay_s),
                return_exceptions=True,
            )
        finally:
            for w in (c_writer, u_writer):
                w.close()

    def cut() -> None:
        CUT.set()
        sys.stdout.write("cut\n")
        sys.stdout.flush()

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, cut)
    server = await asyncio.start_server(handle, HOST, 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> None:
    upstream_port, one_way_ms, parent = int(argv[0]), float(argv[1]), int(argv[2])
    _die_with(parent)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # two sockets per connection
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the lab decides when this ends
    asyncio.run(_serve(upstream_port, one_way_ms / 1000))


if __name__ == "__main__":
    main(sys.argv[1:])
