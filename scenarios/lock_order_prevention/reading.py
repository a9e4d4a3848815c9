"""lock-order-prevention: how the load claims read a run record: the pairs of workers (the
ones that lock in opposite order), how the workers ended, the cycles the detector found, and
the line a verdict quotes (outcomes and wall time).
"""

from __future__ import annotations

from typing import Any

from lab.core.claims import Record
from lab.core.outcome import notation


def _pairs(rec: Record) -> int:
    return int(rec["knobs"]["n"]) // 2


def _out(rec: Record) -> dict[str, int]:
    return dict(rec.get("outcomes", {}))


def _cycles(rec: Record) -> list[dict[str, Any]]:
    return list(rec.get("evidence", {}).get("wait_for_cycles", []))


def _line(rec: Record) -> str:
    return f"{rec['variant']}: {notation(_out(rec))} in {rec.get('wall_ms', 0):.0f} ms"
