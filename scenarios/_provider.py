"""A payment provider (and message sink) on loopback, run by the side-effects scenario.

A real HTTP server in a process of its own, started by the lab and killed with it (Linux
PR_SET_PDEATHSIG) or by PID. It records every charge and every message it receives, and
can be told to answer late *after* it has charged: the client's timeout then fires on a
charge that did happen. It honours an `Idempotency-Key` header: a key it has seen gets
the stored charge back and charges nothing.

Protocol (the lab's worker protocol): one JSON config line on stdin; one JSON line
``{"event": "ready", "port": ..., "pid": ...}`` on stdout; then HTTP:
  POST /charges   {"customer", "period", "amount"}   -> the charge ({"replayed": true} on a key seen)
  POST /messages  {"to", "body"}                     -> {"id": n}
  GET  /log                                          -> every charge and message, in order

`Provider` below is the lab's side: it starts the process, talks HTTP to it, stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.aio import within
from lab.errors import ScenarioFailure
from lab.servers.embedded import stop_pid

if TYPE_CHECKING:
    from lab.scenario import Env

PROVIDER = str(Path(__file__).resolve())


class Ledger:
    """What the provider did, in arrival order (one lock: handlers run in threads)."""

    def __init__(self, late_replies: int, late_reply_s: float) -> None:
        self.lock = threading.Lock()
        self.charges: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.by_key: dict[str, dict[str, Any]] = {}
        self.requests = 0
        self.late_left, self.late_reply_s = late_replies, late_reply_s

    def charge(self, body: dict[str, Any], key: str | None) -> tuple[dict[str, Any], float]:
        """(the reply, how long to wait before sending it)."""
        with self.lock:
            self.requests += 1
            if key is not None and key in self.by_key:
                return {**self.by_key[key], "replayed": True}, 0.0
            charge = {"id": len(self.charges) + 1, **body, "key": key, "t": time.perf_counter()}
            self.charges.append(charge)
            if key is not None:
                self.by_key[key] = charge
            late = self.late_left > 0
            self.late_left -= late
        return {**charge, "replayed": False}, self.late_reply_s if late else 0.0

    def message(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.requests += 1
            msg = {"id": len(self.messages) + 1, **body, "t": time.perf_counter()}
            self.messages.append(msg)
        return msg


def handler(ledger: Ledger) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client gave up waiting: its choice
                self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path != "/log":
                return self._reply(404, {"error": self.path})
            with ledger.lock:
                self._reply(200, {"charges": ledger.charges, "messages": ledger.messages,
                                  "requests": ledger.requests})  # fmt: skip

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if self.path == "/charges":
                reply, wait_s = ledger.charge(body, self.headers.get("Idempotency-Key"))
                time.sleep(wait_s)  # charged already; the answer is late (the subject: time)
                return self._reply(200, reply)
            if self.path == "/messages":
                return self._reply(200, ledger.message(body))
            return self._reply(404, {"error": self.path})

    return Handler


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this process when the lab (`parent`) dies; if it already has, exit now."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the lab died before prctl took effect: no signal will come
        os._exit(0)


def main() -> None:
    cfg = json.loads(sys.stdin.readline())
    ledger = Ledger(int(cfg.get("late_replies", 0)), float(cfg.get("late_reply_s", 0)))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(ledger))
    server.daemon_threads = True
    port = server.server_address[1]
    sys.stdout.write(json.dumps({"event": "ready", "port": port, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    server.serve_forever()


# --- the lab's side --------------------------------------------------------------------


class Provider:
    """The provider process: started by the run, stopped by PID in the run's cleanup."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc, self.port = proc, port

    @classmethod
    @contextlib.asynccontextmanager
    async def started(cls, env: Env) -> AsyncIterator[Provider]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, PROVIDER, str(os.getpid()), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip

        def stop_if_ours() -> None:  # also if this task is cancelled
            if proc.returncode is None:  # once reaped (the finally below), the PID is not ours
                stop_pid(proc.pid)

        env.cleanups.append(stop_if_ours)
        try:
            assert proc.stdin is not None and proc.stdout is not None
            cfg = {"late_replies": 1, "late_reply_s": env.params["late_reply_s"]}
            proc.stdin.write((json.dumps(cfg) + "\n").encode())
            await proc.stdin.drain()
            try:
                ready = json.loads(await within(proc.stdout.readline(), 30))
            except (TimeoutError, ValueError):
                raise ScenarioFailure(f"{env.scenario}: the provider did not start") from None
            env.extra_evidence["provider_pid"] = proc.pid
            env.extra_evidence["provider_port"] = ready["port"]
            yield cls(proc, int(ready["port"]))
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            with contextlib.suppress(Exception):
                await within(proc.wait(), 10)

    async def post(self, path: str, body: Any, headers: Mapping[str, str], timeout: float) -> Any:
        return await within(self._request("POST", path, body, headers), timeout)

    async def _request(self, method: str, path: str, body: Any, headers: Mapping[str, str]) -> Any:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            data = json.dumps(body).encode() if body is not None else b""
            head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(data)}",
                    "Content-Type: application/json", "Connection: close",
                    *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
        status = int(raw.split(b" ", 2)[1])
        payload = json.loads(raw.partition(b"\r\n\r\n")[2])
        if status != 200:
            raise ScenarioFailure(f"provider: {method} {path} -> {status} {payload}")
        return payload

    async def record(self, env: Env) -> None:
        log = await within(self._request("GET", "/log", None, {}), 10)
        env.extra_evidence["provider"] = log
        env.add("charges", len(log["charges"]))
        env.add("messages", len(log["messages"]))


if __name__ == "__main__":
    _die_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid())  # the lab's PID
    main()
