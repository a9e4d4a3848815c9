"""Server-side facts about a run: deadlock reports, pg_stat_database, Redis commandstats."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import asyncpg

_LINE = re.compile(r"^\S+ \S+ \S+ \[(?P<pid>\d+)\] (?P<db>\S*) (?P<level>[A-Z]+):  (?P<msg>.*)$")
_WAIT = re.compile(
    r"Process (?P<pid>\d+) waits for (?P<mode>\w+) on (?P<what>.+?); blocked by process (?P<by>\d+)\."
)
_STMT = re.compile(r"^Process (?P<pid>\d+): (?P<sql>.*)$")


@dataclass
class Wait:
    pid: int
    mode: str
    on: str  # "transaction 6992", "tuple (0,6) of relation 16533 of database 5", ...
    blocked_by: int


@dataclass
class DeadlockReport:
    """One `ERROR: deadlock detected` with its DETAIL lines."""

    victim_pid: int
    database: str
    waits: list[Wait] = field(default_factory=list)
    statements: dict[int, str] = field(default_factory=dict)

    @property
    def cycle_length(self) -> int:
        return len(self.waits)

    @property
    def tuple_hops(self) -> int:
        return sum(1 for w in self.waits if w.on.startswith("tuple"))


def parse_deadlocks(log: str, database: str | None = None) -> list[DeadlockReport]:
    """Deadlock reports in a PostgreSQL log written with log_line_prefix '%m [%p] %d '."""
    reports: list[DeadlockReport] = []
    current: DeadlockReport | None = None
    in_detail = False
    for raw in log.splitlines():
        m = _LINE.match(raw)
        if m:
            in_detail = False
            msg = m["msg"]
            if m["level"] == "ERROR" and msg.startswith("deadlock detected"):
                current = DeadlockReport(victim_pid=int(m["pid"]), database=m["db"])
                if database is None or m["db"] == database:
                    reports.append(current)
            elif (
                current is not None
                and m["level"] == "DETAIL"
                and int(m["pid"]) == current.victim_pid
            ):
                in_detail = True
                _detail_line(current, msg)
            elif (
                current is not None
                and int(m["pid"]) == current.victim_pid
                and m["level"]
                in (
                    "HINT",
                    "CONTEXT",
                    "STATEMENT",
                )
            ):
                continue
            else:
                current = None
        elif in_detail and current is not None and raw.startswith("\t"):
            _detail_line(current, raw.strip())
    return reports


def _detail_line(report: DeadlockReport, text: str) -> None:
    if w := _WAIT.match(text):
        report.waits.append(Wait(int(w["pid"]), w["mode"], w["what"], int(w["by"])))
    elif s := _STMT.match(text):
        report.statements[int(s["pid"])] = s["sql"]


_LOCK_WAIT = re.compile(
    r"^process (?P<pid>\d+) (?P<what>still waiting|acquired|detected deadlock while waiting|"
    r"avoided deadlock for) (?:for )?(?P<mode>\w+) on (?P<on>.+?) after (?P<ms>[\d.]+) ms"
)
MAX_LOCK_WAITS = 200  # lines a record keeps


def parse_lock_waits(log: str, database: str | None = None) -> list[dict[str, Any]]:
    """`log_lock_waits` lines ("process 8200 still waiting for ShareLock on transaction
    99812 after 1000.1 ms", then "acquired ..." or "detected deadlock while waiting ..."),
    in log order, from a log written with log_line_prefix '%m [%p] %d '."""
    out: list[dict[str, Any]] = []
    for raw in log.splitlines():
        m = _LINE.match(raw)
        if not m or m["level"] != "LOG" or (database is not None and m["db"] != database):
            continue
        if w := _LOCK_WAIT.match(m["msg"]):
            what = w["what"].removesuffix(" for").replace(" while waiting", "")
            out.append(
                {
                    "pid": int(w["pid"]),
                    "event": what,
                    "mode": w["mode"],
                    "on": w["on"],
                    "after_ms": float(w["ms"]),
                }
            )
    return out[:MAX_LOCK_WAITS]


def summarize_deadlocks(reports: list[DeadlockReport]) -> dict[str, Any]:
    """What a record keeps: counts, cycle lengths, tuple hops, and the longest report."""
    lengths = Counter(r.cycle_length for r in reports)
    longest = max(reports, key=lambda r: r.cycle_length, default=None)
    return {
        "reports": len(reports),
        "cycle_lengths": {str(k): v for k, v in sorted(lengths.items())},
        "max_cycle": longest.cycle_length if longest else 0,
        "tuple_hops": sum(r.tuple_hops for r in reports),
        "example": asdict(longest) if longest else None,
    }


async def pg_deadlocks(conn: asyncpg.Connection, database: str) -> int:
    """pg_stat_database.deadlocks of one database (cumulative; take deltas)."""
    value = await conn.fetchval(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = $1", database
    )
    return int(value or 0)


async def blocking_tree(conn: asyncpg.Connection, database: str) -> list[dict[str, Any]]:
    """Sessions that block or are blocked, with pg_blocking_pids(): who waits behind whom.

    The same rows `locklab locks` shows (lab/load/locks.py), in a record's shape: the query cut
    to 120 characters, plus what each waiter wants and who holds it."""
    from lab.load.locks import blocking_sessions

    return [
        {
            "pid": s.pid,
            "blocked_by": s.blocked_by,
            "state": s.state,
            "wait_event_type": s.wait_event_type,
            "query": s.query[:120],
            "wait_event": s.wait_event,
            "wants": s.wants,
            "holders": [asdict(h) for h in s.holders],
        }
        for s in await blocking_sessions(conn, database)
    ]


def commandstats_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """Calls per Redis command between two `INFO commandstats` answers."""

    def calls(info: dict[str, Any]) -> dict[str, int]:
        out = {}
        for key, value in info.items():
            if key.startswith("cmdstat_") and isinstance(value, dict):
                out[key.removeprefix("cmdstat_")] = int(value.get("calls", 0))
        return out

    b, a = calls(before), calls(after)
    return {k: a[k] - b.get(k, 0) for k in sorted(a) if a[k] - b.get(k, 0)}


STATS_SETTLE_S = 3.0


async def deadlocks_since(
    conn: asyncpg.Connection, database: str, before: int, expected: int
) -> int:
    """pg_stat_database.deadlocks since `before`; backends flush their counts on exit, so
    wait (bounded) until the count reaches what the actors saw or stops changing."""
    deadline = time.monotonic() + STATS_SETTLE_S
    delta = 0
    while True:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        delta = await pg_deadlocks(conn, database) - before
        if delta >= expected or time.monotonic() > deadline:
            return delta
        await asyncio.sleep(0.05)
