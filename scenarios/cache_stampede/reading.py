"""cache-stampede: how the claims read a record. `_c` is one of the run's counters (0 when
the run never counted it); `_failure_mode` says the run is one of DL-21's failure modes (a
rebuild that throws, or one that outlives the lock), where the lock admits more than one
rebuild and the claims on the counts and the GET rate are not judged.
"""

from __future__ import annotations

from lab.core.claims import Record


def _c(rec: Record, name: str) -> int:
    return int(rec.get("counters", {}).get(name, 0))


def _failure_mode(rec: Record) -> bool:
    p = rec["params"]
    return bool(p["rebuild_fails"]) or p["rebuild_ms"] >= p["lock_ttl_s"] * 1000
