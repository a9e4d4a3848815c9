"""How an actor's end becomes one outcome key: a business word, a SQLSTATE, or "timeout"."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping

import asyncpg

TIMEOUT = "timeout"


def classify(exc: BaseException) -> str | None:
    """The outcome key of an exception, or None when it is not a database or timeout end."""
    if isinstance(exc, asyncpg.PostgresError) and getattr(exc, "sqlstate", None):
        return str(exc.sqlstate)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return TIMEOUT
    return None


def ordered(counts: Mapping[str, int], declared: Iterable[str] = ()) -> dict[str, int]:
    """Counts in the documents' order: "ok" first, then declared keys, then the rest."""
    order = ["ok", *[k for k in declared if k != "ok"]]
    keys = [k for k in order if counts.get(k)] + sorted(k for k in counts if k not in order)
    return {k: int(counts[k]) for k in keys if counts[k]}


def notation(counts: Mapping[str, int]) -> str:
    """`{"ok":4,"40P01":196}`: the documents' compact notation."""
    return json.dumps(dict(counts), separators=(",", ":"))
