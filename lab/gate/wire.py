"""The PostgreSQL protocol as a proxy sees it: frames, not results.

A client speaks first with one untyped packet (length, then a code: SSLRequest,
GSSENCRequest, CancelRequest or the StartupMessage's protocol version); every later
message in either direction is a type byte and a length that counts itself. The gate
reads the frames, looks into the few it needs (Query, Parse, Bind, Execute, Sync from the
client; BackendKeyData, ReadyForQuery and ErrorResponse from the server) and forwards
every byte as it came.
"""

from __future__ import annotations

import asyncio
import re
import struct
from dataclasses import dataclass, field

PROTOCOL_3_0 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
MAX_MESSAGE = 1 << 30
PARAMETER = re.compile(r"\$(\d+)")  # the server's own limit for a message from a client

# What a client's message asks for (the frontend types of protocol 3.0).
QUERY, PARSE, BIND, DESCRIBE, EXECUTE, SYNC, FLUSH, CLOSE, TERMINATE = b"QPBDESHCX"
COPY_DATA, COPY_DONE, COPY_FAIL = b"dcf"
# ... and the server's messages the gate reads.
BACKEND_KEY, READY, ERROR, PARAMETER_TYPES = b"KZEt"


class ProtocolError(Exception):
    """The bytes are not the PostgreSQL protocol (or not a version the gate speaks)."""


async def read_packet(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """The client's first packet, or the one after an SSLRequest: (code, whole packet)."""
    head = await reader.readexactly(8)
    length, code = struct.unpack("!ii", head)
    if not 8 <= length <= 10_000:
        raise ProtocolError(f"a startup packet of {length} bytes")
    return code, head + await reader.readexactly(length - 8)


async def read_message(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One typed message: (its type byte, the whole message as sent)."""
    head = await reader.readexactly(5)
    length = int.from_bytes(head[1:], "big")
    if not 4 <= length <= MAX_MESSAGE:
        raise ProtocolError(f"a message of type {head[:1]!r} claims {length} bytes")
    return head[0], head + await reader.readexactly(length - 4)


def startup_parameters(packet: bytes) -> dict[str, str]:
    """user, database, application_name... from a StartupMessage."""
    parts = packet[8:].split(b"\0")
    return {
        parts[i].decode(errors="replace"): parts[i + 1].decode(errors="replace")
        for i in range(0, len(parts) - 1, 2)
        if parts[i]
    }


def cstring(body: bytes, at: int) -> tuple[str, int]:
    end = body.index(b"\0", at)
    return body[at:end].decode(errors="replace"), end + 1


def error_fields(message: bytes) -> dict[str, str]:
    """An ErrorResponse's fields by code: C the SQLSTATE, M the message, ..."""
    fields: dict[str, str] = {}
    at = 5
    while at < len(message) and message[at] != 0:
        kind = chr(message[at])
        fields[kind], at = cstring(message, at + 1)
    return fields


def error_code(message: bytes) -> str:
    """The SQLSTATE of an ErrorResponse."""
    return error_fields(message).get("C", "?????")


@dataclass
class Statement:
    """What one Bind/Execute runs: its SQL (kept by statement name for named ones) and the
    parameters Bind sent, shown as text (binary ones as hex)."""

    sql: str
    params: list[str | None] = field(default_factory=list)

    def inlined(self) -> str:
        """The SQL with each $n replaced by its value as a literal (for a spec's step)."""
        if not self.params:
            return self.sql.strip()

        def value(match: re.Match[str]) -> str:
            n = int(match[1])
            if not 1 <= n <= len(self.params):
                return match[0]
            param = self.params[n - 1]
            return "NULL" if param is None else "'" + param.replace("'", "''") + "'"

        return PARAMETER.sub(value, self.sql).strip()

    def shown(self) -> str:
        """The SQL, then the parameters' values; an empty query (psycopg_pool's check of a
        connection it hands out sends one) as `<empty query>`, not as a blank."""
        if not self.params:
            return self.sql.strip() or "<empty query>"
        values = ", ".join("NULL" if p is None else repr(p) for p in self.params)
        return f"{self.sql.strip()}  -- ({values})"


def parse_message(message: bytes) -> tuple[str, str, list[int]]:
    """Parse: (statement name, SQL, the parameter types it names; 0 = the server infers)."""
    name, at = cstring(message, 5)
    sql, at = cstring(message, at)
    (n,) = struct.unpack_from("!h", message, at)
    return name, sql, list(struct.unpack_from(f"!{n}I", message, at + 2))


def describe_statement(message: bytes) -> str | None:
    """Describe: the statement's name when it describes a statement ('S'), else None."""
    return cstring(message, 6)[0] if message[5:6] == b"S" else None


def parameter_types(message: bytes) -> list[int]:
    """ParameterDescription: the type of each parameter, as the server inferred it."""
    (n,) = struct.unpack_from("!h", message, 5)
    return list(struct.unpack_from(f"!{n}I", message, 7))


def bind_message(message: bytes, types: list[int]) -> tuple[str, list[str | None]]:
    """Bind: (statement name, parameter values as text; binary ones decoded by type)."""
    _portal, at = cstring(message, 5)
    name, at = cstring(message, at)
    (n_formats,) = struct.unpack_from("!h", message, at)
    formats = struct.unpack_from(f"!{n_formats}h", message, at + 2)
    at += 2 + 2 * n_formats
    (n_params,) = struct.unpack_from("!h", message, at)
    at += 2
    params: list[str | None] = []
    for i in range(n_params):
        (size,) = struct.unpack_from("!i", message, at)
        at += 4
        if size < 0:
            params.append(None)
            continue
        raw = message[at : at + size]
        at += size
        binary = (formats[i] if n_formats > 1 else formats[0] if n_formats else 0) == 1
        oid = types[i] if i < len(types) else 0
        params.append(binary_text(oid, raw) if binary else raw.decode(errors="replace"))
    return name, params


INTEGERS = {20: "!q", 21: "!h", 23: "!i", 26: "!I"}  # int8, int2, int4, oid
FLOATS = {700: "!f", 701: "!d"}
TEXTS = {18, 19, 25, 114, 705, 1042, 1043}  # char, name, text, json, unknown, bpchar, varchar


def binary_text(oid: int, raw: bytes) -> str:
    """A binary parameter as the server would print it, for the common types; hex else."""
    if oid in INTEGERS and len(raw) == struct.calcsize(INTEGERS[oid]):
        return str(struct.unpack(INTEGERS[oid], raw)[0])
    if oid in FLOATS and len(raw) == struct.calcsize(FLOATS[oid]):
        return repr(struct.unpack(FLOATS[oid], raw)[0])
    if oid == 16 and len(raw) == 1:
        return "true" if raw[0] else "false"
    if oid in TEXTS:
        return raw.decode(errors="replace")
    if oid == 3802 and raw[:1] == b"\x01":  # jsonb: a version byte, then the text
        return raw[1:].decode(errors="replace")
    if oid == 2950 and len(raw) == 16:
        h = raw.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return "\\x" + raw.hex()


def query_text(message: bytes) -> str:
    return cstring(message, 5)[0]
