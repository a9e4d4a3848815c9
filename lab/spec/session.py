"""An isolation spec's session connections as the tester reads them: each session's
wire connection keeps what the server sends during a permutation (`KeptConn`), the
session and its items (`SpecConn`, `SpecStep`), and the handle the sequencer holds for
it (`SessionHandle`: its backend's PID, and to drop it)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from lab.spec.parse import PermutationStep
from lab.spec.wire import PgConn, Result


class Exit(Exception):
    """Where the tester calls exit(1): the run ends, what was printed stays."""


class KeptConn(PgConn):
    """A session's connection. During a permutation its code reads the socket as the
    server answers (`take`) and keeps each read; the tester's loop parses them when it
    looks (`read`: the reads kept up to `at_once` as one, later ones one by one, as the
    tester would have read them). Outside a permutation (`live`) it reads the socket."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.live = True  # before the login, which reads
        self.kept: deque[tuple[float, bytes | str]] = deque()  # (when, bytes or a line)
        self.at_once = 0.0
        self.say: Callable[[str], None] = lambda line: None  # a kept line of the tester's
        self.hung_up = False  # a read found the server gone
        self._scan = b""  # what `take` has not split into messages yet
        super().__init__(*args, **kwargs)

    async def take(self) -> bool:
        """One read of the server's answer, kept; True once ReadyForQuery came (or the
        server hung up)."""
        data = await self.recv()
        self.kept.append((time.monotonic(), data))
        if not data:
            self.hung_up = True
            return True
        self._scan += data
        ready = False
        while len(self._scan) >= 5:
            size = int.from_bytes(self._scan[1:5], "big")
            if len(self._scan) < size + 1:
                break
            ready = ready or self._scan[:1] == b"Z"
            self._scan = self._scan[size + 1 :]
        return ready

    def read(self, timeout: float | None) -> bool:
        if self.live:
            return super().read(timeout)
        if self.closed or not self.kept:
            return False
        when, item = self.kept.popleft()
        if isinstance(item, str):
            self.say(item)
            return True
        data = item  # and what came with it, as one recv would have read it
        while data and when <= self.at_once and self.kept:
            nxt, more = self.kept[0]
            if nxt > self.at_once or not isinstance(more, bytes) or not more:
                break  # the hang-up too is the next read's, as recv returns it
            self.kept.popleft()
            data += more
        self.feed(data)
        return True

    def go_live(self) -> None:
        """After a permutation: what was kept and not parsed comes first."""
        for _, item in self.kept:
            if isinstance(item, bytes) and not self.closed:
                self.feed(item)
        self.kept.clear()
        self.live = True


@dataclass
class SpecConn:
    name: str
    pg: PgConn
    active: SpecStep | None = None  # sent, its completion not printed yet
    running: SpecStep | None = None  # the step its code is in, as the sequencer granted it
    notices: int = 0

    def kept(self) -> KeptConn:
        """A session's connection (not the control connection's)."""
        return cast(KeptConn, self.pg)


@dataclass
class SpecStep:
    """One item of a permutation: its session and what the session did with it."""

    ps: PermutationStep
    conn: SpecConn
    sent: float = 0.0
    unsent: bool = False  # the connection was gone: nothing was sent
    done: bool = False  # the server's whole answer is kept
    done_at: float = 0.0


class SessionHandle:
    """What the sequencer asks of a session's connection: its backend, and to drop it."""

    def __init__(self, pg: PgConn) -> None:
        self.pg = pg

    def get_server_pid(self) -> int:
        return self.pg.pid

    def terminate(self) -> None:
        self.pg.close()


def error_text(res: Result | None) -> str:
    return res.message() if res is not None else ""
