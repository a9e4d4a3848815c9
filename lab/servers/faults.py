"""A server that dies, refuses or hangs during a run, and a limit the run runs into, named.

``guard_variant`` runs one variant beside a watch of its servers. The watch checks every
WATCH_INTERVAL_S the processes the lab started (gone: it went away; stopped by SIGSTOP:
it stopped answering) and probes every server's port (refused: it went away or refuses;
no reply to a protocol probe for HANG_S: it stopped answering). A fault it sees ends the
variant at once (teardown bounded by TEARDOWN_S); an error the variant raises is checked
against the servers before it is reported, so "connection is closed" becomes "PostgreSQL
at 127.0.0.1:PORT went away during SCENARIO / VARIANT". Both are ``ServerFault``: one
line, exit 3, no record. Library loggers that would print a traceback for the same fault
(asyncpg's pool, asyncio's "Task exception was never retrieved") are kept quiet.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import logging
import os
import resource
import struct
import time
import urllib.parse
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from lab.aio import within
from lab.errors import LabError, ScenarioFailure
from lab.procs.lifecycle import alive, proc_state

T = TypeVar("T")

WATCH_INTERVAL_S = 0.25
PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_S = 2.0
HANG_S = 10.0  # no reply from a server's port this long: it stopped answering
DYING_S = 0.5  # a port refused: how long to wait before telling "refuses" from "went away"
GRACE_S = 2.0  # after a connection error, how long to look for the server's fault
TEARDOWN_S = 15.0  # a variant ended by a fault gets this long to tear down
TEARDOWN_STEP_S = 1.0  # each teardown step against a server (a hung one never answers)
FD_MARGIN = 64  # open files beside the connections: logs, pipes, the event loop
PG_SSL_REQUEST = struct.pack("!ii", 8, 80877103)  # answered by the postmaster itself


_fault: contextvars.ContextVar[list[str]] = contextvars.ContextVar("locklab_fault")


def teardown_s(normal_s: float) -> float:
    """How long one teardown step against a server may wait: `normal_s`, or TEARDOWN_STEP_S
    once the watch named a fault in this run (a hung server would never answer)."""
    return TEARDOWN_STEP_S if _fault.get([]) else normal_s


def fault_named() -> bool:
    """Whether the watch named a fault in this run (teardown then skips waiting on it)."""
    return bool(_fault.get([]))


class ServerFault(ScenarioFailure):
    """The run failed because of a server or a system limit, not the scenario."""


@dataclass
class _Target:
    label: str  # "PostgreSQL at 127.0.0.1:5432"
    host: str
    port: int
    pid: int
    probe: bytes  # what to send for a reply; b"" for a TCP connect only
    silent_since: float | None = None
    last_probe: float = 0.0


def _targets(servers: Any) -> list[_Target]:
    found = []
    pg, redis = getattr(servers, "pg", None), getattr(servers, "redis", None)
    if pg is not None:
        found += _target("PostgreSQL", pg.dsn, 5432, pg.pid, PG_SSL_REQUEST)
    if redis is not None:
        found += _target("Redis", redis.url, 6379, redis.pid, b"PING\r\n")
    for dsn in getattr(servers, "pgbouncer", {}).values():
        found += _target("PgBouncer", dsn, 6432, 0, PG_SSL_REQUEST)
    return found


def _target(product: str, url: str, default_port: int, pid: int, probe: bytes) -> list[_Target]:
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port or default_port
    except ValueError:
        return []
    if not host:  # a Unix socket: watched by PID only
        return [_Target(f"{product} (pid {pid})", "", 0, pid, b"")] if pid else []
    return [_Target(f"{product} at {host}:{port}", host, port, pid, probe)]


async def _check(t: _Target, now: float) -> str | None:
    """What is wrong with one server, if anything."""
    if t.pid:
        if not alive(t.pid):
            return f"{t.label} went away"
        if proc_state(t.pid) == "T":
            return f"{t.label} stopped answering (its process is stopped)"
    if not t.host or now - t.last_probe < PROBE_EVERY_S:
        return None
    t.last_probe = now
    try:
        replied = await within(_probe(t), PROBE_TIMEOUT_S)
    except ConnectionRefusedError:
        if t.pid:  # a killed server closes its port a moment before it is gone
            await asyncio.sleep(DYING_S)
            return f"{t.label} went away" if not alive(t.pid) else f"{t.label} refuses connections"
        return f"{t.label} went away"
    except (OSError, TimeoutError):
        replied = False
    if replied:
        t.silent_since = None
        return None
    t.silent_since = t.silent_since or now
    if now - t.silent_since >= HANG_S:
        return f"{t.label} stopped answering (no reply for {HANG_S:.0f} s)"
    return None


async def _probe(t: _Target) -> bool:
    reader, writer = await asyncio.open_connection(t.host, t.port)
    try:
        if not t.probe:
            return True
        writer.write(t.probe)
        await writer.drain()
        return bool(await reader.read(1))
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


class Watch:
    """The servers of one run, checked on demand or continuously."""

    def __init__(self, servers: Any) -> None:
        self.targets = _targets(servers)

    async def check(self, started_only: bool = False) -> str | None:
        now = time.monotonic()
        for t in self.targets:
            if started_only and not t.pid:
                continue
            if problem := await _check(t, now):
                return problem
        return None

    async def run(self) -> str:
        """Returns only when a server is at fault: what is wrong with it."""
        while True:
            if problem := await self.check():
                return problem
            await asyncio.sleep(WATCH_INTERVAL_S)

    async def diagnose(self, grace_s: float, started_only: bool = False) -> str | None:
        """A server's fault, looked for up to `grace_s` (a dying server takes a moment);
        `started_only`: only among the servers the lab started (known by PID)."""
        for t in self.targets:
            t.last_probe = 0.0  # probe now
        deadline = time.monotonic() + grace_s
        while True:
            if problem := await self.check(started_only):
                return problem
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(WATCH_INTERVAL_S)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def _connection_error(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a lost or refused connection, or a timeout."""
    names = {"InterfaceError", "ConnectionError", "TimeoutError", "ConnectionDoesNotExistError"}
    for e in _chain(exc):
        if isinstance(e, (OSError, TimeoutError, EOFError)):
            return True
        if any(c.__name__ in names for c in type(e).__mro__):
            return True
        module = type(e).__module__
        if module.startswith("asyncpg") and "Connection" in type(e).__name__:
            return True
        if type(e).__name__ in (
            "AdminShutdownError",
            "CrashShutdownError",
            "CannotConnectNowError",
        ):
            return True
    return " connection " in f" {exc} ".lower() or "closed" in str(exc).lower()


def limit_hit(exc: BaseException) -> str | None:
    """Which system limit `exc` ran into, in words, or None."""
    for e in _chain(exc):
        code = e.errno if isinstance(e, OSError) else None
        text = str(e)
        if code in (errno.EMFILE, errno.ENFILE) or "Too many open files" in text:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            return f"ran out of open files (RLIMIT_NOFILE {soft}, `ulimit -n`): use a smaller -n"
        if code == errno.EADDRNOTAVAIL or "Cannot assign requested address" in text:
            return "ran out of local ports (net.ipv4.ip_local_port_range): use a smaller -n"
        if isinstance(e, MemoryError) or code == errno.ENOMEM:
            return "ran out of memory: use a smaller -n"
    return None


def check_resources(connections: int, n: int) -> None:
    """Refuse up front a run whose connections the process cannot open: open files (the
    soft limit is raised to the hard one when that suffices) and local ports."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = 32
    want = connections + in_use + FD_MARGIN
    if want > soft:
        if hard != resource.RLIM_INFINITY and want > hard:
            raise LabError(
                f"-n {n} needs about {want} open files (one socket per connection); "
                f"RLIMIT_NOFILE allows {hard} (`ulimit -n`): raise it, or use a smaller -n "
                "or --connect pool:<size>"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = map(int, f.read().split())
    except (OSError, ValueError):
        return
    if connections > high - low + 1:
        raise LabError(
            f"-n {n} needs about {connections} local ports; net.ipv4.ip_local_port_range "
            f"offers {high - low + 1}: use a smaller -n or --connect pool:<size>"
        )


_ending = False  # a fault was named, or the run interrupted: echoes in logs are not news
_held: list[tuple[asyncio.AbstractEventLoop, dict[str, Any]]] = []  # echoes, fate unknown
_guarding = 0  # variants under guard_variant right now


def _release_held(drop: bool) -> None:
    """The held connection echoes: dropped after a fault or an interrupt, else printed."""
    held = list(_held)
    _held.clear()
    if drop or _ending:
        return
    for lp, context in held:
        report = getattr(lp, "_locklab_report", None)
        if report is not None:
            report(lp, context)


def _quiet(loop: asyncio.AbstractEventLoop) -> None:
    """asyncpg's pool logs a traceback when it cannot reconnect; a task that lost its
    connection and was never awaited (a scenario's observer, a connect cut by Ctrl-C)
    logs one when it is freed. After a named fault or an interrupt both are echoes of it:
    dropped. Anything else is printed as ever."""
    logging.getLogger("asyncpg").addHandler(logging.NullHandler())
    if getattr(loop, "_locklab_quiet", False):
        return
    previous = loop.get_exception_handler()

    def report(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if previous is not None:
            previous(lp, context)
        else:
            lp.default_exception_handler(context)

    def handler(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, BaseException) and _connection_error(exc):
            if _ending:
                return
            if _guarding:
                # A dying server's echo can be logged before the watch has named the fault:
                # held until the variant's end says whether it was one (then dropped).
                _held.append((lp, context))
                return
        report(lp, context)

    loop.set_exception_handler(handler)
    loop._locklab_report = report  # type: ignore[attr-defined]
    loop._locklab_quiet = True  # type: ignore[attr-defined]


async def guard_variant(run: Awaitable[T], servers: Any, during: str) -> T:
    """`run`'s result; a server fault seen by the watch, or behind an error `run` raised,
    becomes one ServerFault naming the server and `during` ("SCENARIO / VARIANT")."""
    global _guarding
    _quiet(asyncio.get_running_loop())
    _guarding += 1
    try:
        return await _guarded(run, servers, during)
    finally:
        _guarding -= 1
        _release_held(drop=_ending)


async def _guarded(run: Awaitable[T], servers: Any, during: str) -> T:
    global _ending
    watch = Watch(servers)
    seen: list[str] = []
    token = _fault.set(seen)  # the task's context shares `seen`: teardown_s() reads it
    try:
        task = asyncio.ensure_future(run)
    finally:
        _fault.reset(token)
    watcher = asyncio.ensure_future(watch.run())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # Ctrl-C: the variant tears down, bounded
        _ending = True
        watcher.cancel()
        task.cancel()
        await asyncio.wait({task}, timeout=TEARDOWN_S)
        _retrieve(task)
        raise
    if not task.done():  # the watch saw a fault first
        problem = watcher.result()
        _ending = True
        seen.append(problem)
        task.cancel()
        await asyncio.wait({task}, timeout=TEARDOWN_S)
        _retrieve(task)
        raise ServerFault(f"{problem} during {during}")
    watcher.cancel()  # bounded: a watch that swallowed its cancel must not hang the run
    await asyncio.wait({watcher}, timeout=TEARDOWN_S)
    _retrieve(watcher)
    exc = None if task.cancelled() else task.exception()
    if exc is None:
        return task.result()
    # A LabError is one line the user can act on (an unreachable DSN of theirs); unless a
    # server the lab started died meanwhile ("could not open 40 connections: ...").
    started_only = isinstance(exc, LabError)
    fault = await watch.diagnose(GRACE_S if _connection_error(exc) else 0.0, started_only)
    if fault is None and (limit := limit_hit(exc)) is not None:
        _ending = True
        raise ServerFault(limit.replace(":", f" during {during}:", 1)) from None
    if fault is None:
        raise exc
    _ending = True
    raise ServerFault(f"{fault} during {during}") from None


def _retrieve(task: asyncio.Future[Any]) -> None:
    if task.done() and not task.cancelled():
        task.exception()
