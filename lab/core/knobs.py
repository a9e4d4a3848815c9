"""How the load arrives, as the CLI and a verify profile set it: `Knobs`, recorded with
every result, and the parsers of its --arrival, --connect and --redis-client values."""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import Any

from lab.errors import LabError


@dataclass(frozen=True)
class Knobs:
    """Everything about how the load arrives; recorded with every result."""

    n: int
    arrival: str
    connect: str
    deadlock_timeout_ms: int
    seed: int
    actor_timeout_s: float
    run_timeout_s: float
    rtt: str = ""  # --rtt: extra round-trip time the actors' connections pay ("" = none)
    procs: int = 0  # worker processes the actors are sharded over; 0 = the scenario's choice
    redis_client: str = (
        "pooled"  # pooled (redis-py) | pipelined (lab.load.autopipe, node-redis's way)
    )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_arrival(spec: str) -> tuple[str, float, float]:
    """`burst` | `stagger:<ms>[~<jitter_ms>]` | `poisson:<per_s>` -> (kind, value, jitter).

    `stagger:5ms~1ms` spaces starts by 5 ms plus a seeded uniform 0..1 ms, the way a
    `setTimeout(5)` loop fires late; exact 5 ms spacing phase-locks with a 5 ms step pause.
    """
    if spec == "burst":
        return "burst", 0.0, 0.0
    num = r"(\d+(?:\.\d+)?)"
    if m := re.fullmatch(rf"stagger:{num}(?:ms)?(?:~{num}(?:ms)?)?", spec):
        return "stagger", float(m[1]), float(m[2] or 0)
    if (m := re.fullmatch(rf"poisson:{num}(?:/s)?", spec)) and float(m[1]) > 0:
        return "poisson", float(m[1]), 0.0
    raise LabError(
        f"--arrival {spec!r}: expected burst, stagger:<ms>[~<jitter_ms>] or poisson:<per_s>"
    )


PGBOUNCER_MODES = {"pgbouncer-transaction": "transaction", "pgbouncer-session": "session"}


def parse_connect(spec: str) -> tuple[str, int]:
    """`per-actor` | `pool:<size>` | `tx-pool:<size>` | `pgbouncer-transaction` |
    `pgbouncer-session`. pool: a client per actor; tx-pool: a client per transaction
    attempt, FIFO (node-postgres' `db.tx`)."""
    if spec == "per-actor":
        return "per-actor", 0
    if spec in PGBOUNCER_MODES:
        return spec, 0
    m = re.fullmatch(r"(pool|tx-pool):(\d+)", spec)
    if not m or int(m[2]) < 1:
        raise LabError(
            f"--connect {spec!r}: expected per-actor, pool:<size>, tx-pool:<size> (size >= 1), "
            "pgbouncer-transaction or pgbouncer-session"
        )
    return m[1], int(m[2])


REDIS_CLIENTS = ("pooled", "pipelined")


def parse_redis_client(spec: str) -> str:
    if spec not in REDIS_CLIENTS:
        raise LabError(f"--redis-client {spec!r}: expected {' or '.join(REDIS_CLIENTS)}")
    return spec


def start_offsets(arrival: str, n: int, seed: int) -> list[float]:
    """Seconds after the clock starts at which each actor begins."""
    kind, value, jitter = parse_arrival(arrival)
    if kind == "burst":
        return [0.0] * n
    rng = random.Random(f"{seed}:arrival")
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        if kind == "stagger":
            t += (value + (rng.uniform(0, jitter) if jitter else 0.0)) / 1000
        else:
            t += rng.expovariate(value)
    return out


def connections_needed(connect: str, n: int) -> int:
    """Client connections the actors hold (through PgBouncer: to PgBouncer, not the server)."""
    kind, size = parse_connect(connect)
    return n if kind == "per-actor" or kind in PGBOUNCER_MODES else size


def server_connections_needed(connect: str, n: int) -> int:
    """Connections the actors take from the PostgreSQL server itself."""
    kind, _ = parse_connect(connect)
    return 0 if kind in PGBOUNCER_MODES else connections_needed(connect, n)
