"""cache-stampede: how the claims read a record. `_c` is one of the run's counters (0 when
the run never counted it); `_failure_mode` says the run is one of DL-21's failure modes (a
rebuild that throws, or one that outlives the lock), where the lock admits more than one
rebuild and the claims on the counts and the GET rate are not judged. `_variants` gives
the buggy and fixed records a claim reads: verify hands it the code mutants' records too,
and under a counterfactual on a mutant, buggy's and fixed's are that mutant's run.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Record

VARIANTS = ("buggy", "fixed")


def _c(rec: Record, name: str) -> int:
    return int(rec.get("counters", {}).get(name, 0))


def _failure_mode(rec: Record) -> bool:
    p = rec["params"]
    return bool(p["rebuild_fails"]) or p["rebuild_ms"] >= p["lock_ttl_s"] * 1000


def _variants(records: Mapping[str, Record]) -> list[tuple[str, Record]]:
    """(variant, record) for buggy and fixed, those of them the run has."""
    return [(v, records[v]) for v in VARIANTS if v in records]
