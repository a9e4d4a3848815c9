"""A payment provider (and message sink) on loopback: an HTTP server in a worker process.

A real HTTP server in a process of its own, run on the harness's worker protocol
(``lab.procs.workers``: config in, events out, it dies with the lab, ``close`` stops it by PID).
It records every charge and every message it receives, and can be told to answer late
*after* it has charged: the client's timeout then fires on a charge that did happen. It
honours an ``Idempotency-Key`` header: a key it has seen gets the stored charge back and
charges nothing. One event loop serves every request, so the ledger needs no lock.

Config: ``{"late_replies": N, "late_reply_s": S}`` (the first N charges answer S late).
Events: ``ready``, then ``listening`` with the port. HTTP:
  POST /charges   {"customer", "period", "amount"}   -> the charge ({"replayed": true} on a key seen)
  POST /messages  {"to", "body"}                     -> {"id": n}
  GET  /log                                          -> every charge and message, in order

`Provider` is the lab's side: ``p = await Provider.start(late_reply_s)`` starts the process,
``p.post`` / ``p.log`` talk HTTP to it, ``await p.close()`` stops it.

This module imports only the standard library and ``lab.procs.workers`` at import time: the
provider process runs it as its script.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lab.aio import within
from lab.errors import ScenarioFailure
from lab.procs.workers import Child, Worker, run_child

PROVIDER = str(Path(__file__).resolve())
HTTP_S = 10.0  # the lab's bound on one request it makes itself (the log); charges set theirs


class Ledger:
    """What the provider did, in arrival order."""

    def __init__(self, late_replies: int, late_reply_s: float) -> None:
        self.charges: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.by_key: dict[str, dict[str, Any]] = {}
        self.requests = 0
        self.late_left, self.late_reply_s = late_replies, late_reply_s

    def charge(self, body: dict[str, Any], key: str | None) -> tuple[dict[str, Any], float]:
        """(the reply, how long to wait before sending it)."""
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
        self.requests += 1
        msg = {"id": len(self.messages) + 1, **body, "t": time.perf_counter()}
        self.messages.append(msg)
        return msg

    def log(self) -> dict[str, Any]:
        return {"charges": self.charges, "messages": self.messages, "requests": self.requests}


async def serve(ledger: Ledger, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One HTTP/1.1 request (Connection: close): route it, answer, close."""
    try:
        head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        method, path, _ = head[0].split(" ", 2)
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:] if h)}
        raw = await reader.readexactly(int(headers.get("content-length", 0)))
        status, reply = 404, {"error": path}
        if (method, path) == ("GET", "/log"):
            status, reply = 200, ledger.log()
        elif (method, path) == ("POST", "/charges"):
            status, (reply, wait_s) = (
                200,
                ledger.charge(json.loads(raw), headers.get("idempotency-key")),
            )
            await asyncio.sleep(wait_s)  # charged already; the answer is late (the subject: time)
        elif (method, path) == ("POST", "/messages"):
            status, reply = 200, ledger.message(json.loads(raw))
        data = json.dumps(reply).encode()
        writer.write(
            f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\nContent-Type: "
            f"application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            + data
        )
        with contextlib.suppress(OSError):  # the client gave up waiting: its choice
            await writer.drain()
    finally:
        writer.close()


async def main(child: Child) -> None:
    cfg = child.config
    ledger = Ledger(int(cfg.get("late_replies", 0)), float(cfg.get("late_reply_s", 0)))
    server = await asyncio.start_server(lambda r, w: serve(ledger, r, w), "127.0.0.1", 0)
    child.emit("listening", port=server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()  # until the lab stops the process


# --- the lab's side --------------------------------------------------------------------


class Provider:
    """The provider process, seen from the lab: its worker handle and its port."""

    def __init__(self, worker: Worker, port: int) -> None:
        self.worker, self.port = worker, port

    @property
    def pid(self) -> int:
        return self.worker.pid

    @classmethod
    async def start(cls, late_reply_s: float, late_replies: int = 1) -> Provider:
        """Start the process; return once it listens (``close`` it in a finally)."""
        cfg = {"late_replies": late_replies, "late_reply_s": late_reply_s}
        worker = await Worker.spawn(PROVIDER, cfg, name="provider", fork=True)
        try:
            port = int((await worker.wait_for("listening")).fields["port"])
        except BaseException:
            await worker.close()
            raise
        return cls(worker, port)

    async def close(self) -> None:
        """Stop the process by its PID and reap it."""
        await self.worker.close()

    async def post(self, path: str, body: Any, headers: Mapping[str, str], timeout: float) -> Any:
        """POST `body` as JSON; TimeoutError when the answer takes longer than `timeout`."""
        return await within(self._request("POST", path, body, headers), timeout)

    async def log(self) -> dict[str, Any]:
        """Every charge and message the provider recorded, in order."""
        log: dict[str, Any] = await within(self._request("GET", "/log", None, {}), HTTP_S)
        return log

    async def _request(self, method: str, path: str, body: Any, headers: Mapping[str, str]) -> Any:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            data = json.dumps(body).encode() if body is not None else b""
            head = [
                f"{method} {path} HTTP/1.1",
                "Host: 127.0.0.1",
                f"Content-Length: {len(data)}",
                "Content-Type: application/json",
                "Connection: close",
                *(f"{k}: {v}" for k, v in headers.items()),
            ]
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


if __name__ == "__main__":
    run_child(main)
