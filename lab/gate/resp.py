"""The Redis protocol (RESP 2 and 3) as a proxy sees it: whole commands and whole replies.

A client sends each command as an array of bulk strings (``*2\\r\\n$3\\r\\nGET\\r\\n...``),
or as one line of words (an inline command, as telnet would). The server answers every
command with one reply, in order; RESP 3 adds push messages (``>``), which answer no
command. The gate reads a command's words and counts the replies, and forwards every
byte as it came.
"""

from __future__ import annotations

import asyncio
import re
import shlex

MAX_ARGS = 1 << 20
MAX_BULK = 512 << 20  # the server's own proto-max-bulk-len
LINE = b"\r\n"
# reply types whose whole reply is one line; bulk types; aggregates (element counts)
SIMPLE = frozenset(b"+-:_,#(")
BULK = frozenset(b"$!=")
AGGREGATE = frozenset(b"*~>")
SAFE = re.compile(r"[\w:./@*+=,{}\[\]-]+")  # words shown without quotes


class RespError(Exception):
    """The bytes are not the Redis protocol."""


async def read_command(reader: asyncio.StreamReader) -> tuple[list[bytes], bytes]:
    """One client command: (its words, the bytes as sent). EOF: IncompleteReadError."""
    first = await reader.readuntil(LINE)
    if not first.startswith(b"*"):  # an inline command
        return [w.encode() for w in _words(first[:-2].decode(errors="replace"))], first
    count = _number(first, MAX_ARGS)
    raw = [first]
    words = []
    for _ in range(count):
        head = await reader.readuntil(LINE)
        if not head.startswith(b"$"):
            raise RespError(f"a command's word starts with {head[:1]!r}, not '$'")
        body = await reader.readexactly(_number(head, MAX_BULK) + 2)
        raw += [head, body]
        words.append(body[:-2])
    return words, b"".join(raw)


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def _number(line: bytes, limit: int) -> int:
    try:
        n = int(line[1:-2])
    except ValueError:
        raise RespError(f"not a length: {line[:40]!r}") from None
    if not -1 <= n <= limit:
        raise RespError(f"a length of {n}")
    return max(n, 0)


class Replies:
    """Cuts the server's byte stream into whole replies: `feed` returns the bytes it
    completed (to forward) and keeps in `replies` each reply that answers a command (its
    first line, enough to tell an error), leaving RESP 3 pushes out."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.replies: list[bytes] = []

    def feed(self, chunk: bytes) -> bytes:
        self.buffer += chunk
        at = 0
        while True:
            end = _reply_end(self.buffer, at)
            if end is None:
                break
            if self.buffer[at] != ord(">"):
                self.replies.append(bytes(self.buffer[at : self.buffer.index(LINE, at)]))
            at = end
        whole = bytes(self.buffer[:at])
        del self.buffer[:at]
        return whole


def _reply_end(buf: bytearray, at: int) -> int | None:
    """Where the reply that starts at `at` ends, or None while it is incomplete."""
    eol = buf.find(LINE, at)
    if eol < 0:
        return None
    kind = buf[at]
    if kind in SIMPLE:
        return eol + 2
    n = _number(bytes(buf[at : eol + 2]), MAX_BULK)
    if kind in BULK:
        stop = eol + 2 + (n + 2 if buf[at + 1 : at + 3] != b"-1" else 0)
        return stop if stop <= len(buf) else None
    if kind in AGGREGATE or kind in b"%|":
        count = n * 2 if kind in b"%|" else n
        end: int | None = eol + 2
        for _ in range(count):
            end = _reply_end(buf, end) if end is not None and end < len(buf) else None
            if end is None:
                return None
        if kind == ord("|"):  # attributes come before the reply they describe
            return _reply_end(buf, end) if end is not None and end < len(buf) else None
        return end
    raise RespError(f"a reply of type {chr(kind)!r}")


def error_code(reply: bytes) -> str | None:
    """The error's code ('ERR', 'WRONGTYPE', 'NOSCRIPT'...) when `reply` is an error."""
    if reply[:1] in (b"-", b"!"):
        return reply[1:].split(b" ", 1)[0].decode(errors="replace") or "ERR"
    return None


def shown(words: list[bytes], limit: int = 60) -> str:
    """A command as a transcript shows it: words quoted where needed, long ones cut."""
    parts = []
    for word in words:
        text = word.decode(errors="replace")
        if len(text) > limit:
            text = text[: limit - 3] + "..."
        parts.append(text if SAFE.fullmatch(text) else _quoted(text))
    return " ".join(parts)


def _quoted(text: str) -> str:
    """A word in double quotes, as redis-cli reads it."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
