"""Recorded runs side by side: the listing behind `locklab results`, the diff behind `locklab diff`.

A diff pairs the records of two runs by scenario and variant and says, per pair, what
changed: the knobs, the servers (PostgreSQL 15 embedded vs 17 in Docker), the outcome
counts, wall time and latency (with the ratio B/A), attempts, invariants, evidence and
every claim verdict (a claim that held in A and not in B is a regression).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.core.outcome import notation
from lab.core.records import Record
from lab.core.results import list_runs, load_run
from lab.errors import LabError
from lab.output.console import REDIS_HARNESS
from lab.output.verdicts import status_text

# --- listing -----------------------------------------------------------------------------


def run_summary(folder: Path, records: Sequence[Record]) -> dict[str, Any]:
    """One line's worth of a recorded run: when, what, on which servers, which claims."""
    first = records[0]
    scenarios: dict[str, list[str]] = {}
    for r in records:
        scenarios.setdefault(str(r.get("scenario")), []).append(str(r.get("variant")))
    verdicts = [c for r in records for c in r.get("claims", [])]
    unique = {(c["id"], c["text"], c["measured"]): c["held"] for c in verdicts}
    return {
        "run_id": folder.name,
        "started_at": min(str(r.get("started_at", "")) for r in records),
        "scenarios": {k: sorted(v) for k, v in scenarios.items()},
        "records": len(records),
        "profile": (first.get("verify") or {}).get("profile"),
        "servers": servers_text(first),
        "git_commit": (first.get("lab") or {}).get("git_commit"),
        "claims_held": sum(1 for h in unique.values() if h),
        "claims": len(unique),
    }


def list_summaries(root: Path | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """The newest `limit` recorded runs under results/ (all by default), newest first;
    unreadable runs are noted, not fatal. Only those runs are read."""
    out = []
    for folder in list_runs(root)[:limit]:
        try:
            records = load_run(str(folder))
        except LabError as exc:
            out.append({"run_id": folder.name, "error": str(exc)})
            continue
        out.append(run_summary(folder, records))
    return out


def servers_text(rec: Record) -> str:
    """`postgresql 17.10 embedded, redis 8.2.3 embedded`."""
    parts = []
    for product, info in sorted((rec.get("servers") or {}).items()):
        parts.append(f"{product} {info.get('version', '?')} {info.get('kind', '?')}")
    return ", ".join(parts) or "-"


# --- diff --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One aspect of a record pair: its value in A and in B, and what the change means."""

    field: str
    a: str
    b: str
    note: str = ""  # "×1.84", "regression", "fixed", ...
    changed: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "a": self.a,
            "b": self.b,
            "note": self.note,
            "changed": self.changed,
        }


@dataclass
class PairDiff:
    scenario: str
    variant: str
    in_a: bool
    in_b: bool
    changes: list[Change] = field(default_factory=list)

    @property
    def changed(self) -> list[Change]:
        return [c for c in self.changes if c.changed]

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "variant": self.variant,
            "in_a": self.in_a,
            "in_b": self.in_b,
            "changes": [c.to_json() for c in self.changes],
        }


@dataclass
class RunDiff:
    run_a: str
    run_b: str
    context: list[Change]  # servers, lab, python: differences between the two runs
    pairs: list[PairDiff]

    @property
    def regressions(self) -> list[tuple[PairDiff, Change]]:
        return [(p, c) for p in self.pairs for c in p.changes if c.note == "regression"]

    def summary(self) -> str:
        both = sum(1 for p in self.pairs if p.in_a and p.in_b)
        only_a = sum(1 for p in self.pairs if not p.in_b)
        only_b = sum(1 for p in self.pairs if not p.in_a)
        flips = [
            c for p in self.pairs for c in p.changes if c.field.startswith("claim ") and c.changed
        ]
        regress = len(self.regressions)
        return (
            f"{both} records in both runs, {only_a} only in A, {only_b} only in B; "
            f"{len(flips)} claim verdicts changed ({regress} regressions)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "context": [c.to_json() for c in self.context],
            "pairs": [p.to_json() for p in self.pairs],
            "summary": self.summary(),
        }


def _ratio(a: float | None, b: float | None) -> str:
    if not a or b is None:
        return ""
    return f"×{b / a:.2f}"


def _same(name: str, a: str, b: str, note: str = "") -> Change:
    return Change(name, a, b, note, changed=a != b)


def _num(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.0f}" if abs(x) >= 10 else f"{x:.1f}"
    return str(x)


def diff_records(a: Record, b: Record) -> list[Change]:
    """Every aspect of two records of the same scenario and variant, changed or not."""
    out: list[Change] = []
    ka, kb = a.get("knobs") or {}, b.get("knobs") or {}
    for key in sorted(set(ka) | set(kb), key=lambda k: (list(ka) + list(kb)).index(k)):
        if ka.get(key) != kb.get(key):
            out.append(Change(f"knob {key}", _num(ka.get(key)), _num(kb.get(key))))
    pa, pb = a.get("params") or {}, b.get("params") or {}
    for key in sorted(set(pa) | set(pb)):
        if pa.get(key) != pb.get(key):
            out.append(Change(f"param {key}", _num(pa.get(key)), _num(pb.get(key))))
    out.append(_same("outcomes", notation(a.get("outcomes", {})), notation(b.get("outcomes", {}))))
    wa, wb = a.get("wall_ms"), b.get("wall_ms")
    out.append(Change("wall ms", _num(wa), _num(wb), _ratio(wa, wb), changed=wa != wb))
    la, lb = a.get("latency_ms") or {}, b.get("latency_ms") or {}
    for p in ("p50", "p99"):
        if p in la or p in lb:
            x, y = la.get(p), lb.get(p)
            out.append(Change(f"latency {p} ms", _num(x), _num(y), _ratio(x, y), changed=x != y))
    ca, cb = a.get("counters") or {}, b.get("counters") or {}
    for key in sorted(set(ca) | set(cb)):
        x, y = ca.get(key), cb.get(key)
        out.append(Change(key, _num(x), _num(y), _ratio(x, y), changed=x != y))
    sa, sb = a.get("samples") or {}, b.get("samples") or {}
    for key in sorted(set(sa) | set(sb)):
        x, y = (sa.get(key) or {}).get("p50"), (sb.get(key) or {}).get("p50")
        out.append(Change(f"{key} p50", _num(x), _num(y), _ratio(x, y), changed=x != y))
    out.append(_same("invariants", _invariants(a), _invariants(b)))
    out += _evidence(a.get("evidence") or {}, b.get("evidence") or {})
    out += _claims(a.get("claims") or [], b.get("claims") or [])
    return out


def _invariants(rec: Record) -> str:
    invs = rec.get("invariants") or []
    bad = [i["name"] for i in invs if not i["held"]]
    if bad:
        return "broken: " + ", ".join(bad)
    return f"{len(invs)} held" if invs else "-"


def _evidence(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Change]:
    out: list[Change] = []
    if "pg_stat_deadlocks" in a or "pg_stat_deadlocks" in b:
        x, y = a.get("pg_stat_deadlocks"), b.get("pg_stat_deadlocks")
        out.append(Change("pg deadlocks", _num(x), _num(y), changed=x != y))
        da, db = a.get("deadlocks") or {}, b.get("deadlocks") or {}
        x, y = da.get("max_cycle"), db.get("max_cycle")
        if x is not None or y is not None:
            out.append(Change("max deadlock cycle", _num(x), _num(y), changed=x != y))
    ra, rb = a.get("redis_commandstats") or {}, b.get("redis_commandstats") or {}
    for cmd in sorted((set(ra) | set(rb)) - REDIS_HARNESS):  # not the harness's own traffic
        x, y = ra.get(cmd), rb.get(cmd)
        out.append(Change(f"redis {cmd.upper()}", _num(x), _num(y), _ratio(x, y), changed=x != y))
    return out


def _claims(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> list[Change]:
    """Claims keyed by id and text, each status by its word: a change to NOT HELD is a
    regression, one to held a fix, any other change of status is named as it is."""
    ha = {(c["id"], c["text"]): c for c in a}
    hb = {(c["id"], c["text"]): c for c in b}
    out = []
    for key in list(ha) + [k for k in hb if k not in ha]:
        x, y = ha.get(key), hb.get(key)
        wx = "-" if x is None else status_text(x)
        wy = "-" if y is None else status_text(y)
        note = ""
        if x is not None and y is not None and wx != wy:
            note = {"NOT HELD": "regression", "held": "now holds"}.get(wy, f"now {wy}")
        name = f"claim {key[0]}: {key[1]}"
        out.append(Change(name, wx, wy, note, changed=wx != wy))
    return out


def _context(a: Sequence[Record], b: Sequence[Record]) -> list[Change]:
    ra, rb = a[0], b[0]
    out = [_same("servers", servers_text(ra), servers_text(rb))]
    la, lb = ra.get("lab") or {}, rb.get("lab") or {}
    for key in ("version", "git_commit", "python"):
        out.append(_same(f"lab {key}", str(la.get(key, "-")), str(lb.get(key, "-"))))
    libs_a, libs_b = la.get("libraries") or {}, lb.get("libraries") or {}
    for name in sorted(set(libs_a) | set(libs_b)):  # records before 2026-12 have none
        out.append(_same(name, str(libs_a.get(name, "-")), str(libs_b.get(name, "-"))))
    out.append(_same("started", str(ra.get("started_at", "-")), str(rb.get("started_at", "-"))))
    return out


def diff_runs(
    a: Sequence[Record], b: Sequence[Record], run_a: str = "A", run_b: str = "B"
) -> RunDiff:
    """Pair two runs' records by scenario and variant (pure: records in, changes out)."""
    if not a or not b:
        raise LabError("diff needs two runs with at least one record each")
    ia = {(r["scenario"], r["variant"]): r for r in a}
    ib = {(r["scenario"], r["variant"]): r for r in b}
    pairs = []
    for key in list(ia) + [k for k in ib if k not in ia]:
        x, y = ia.get(key), ib.get(key)
        pair = PairDiff(key[0], key[1], x is not None, y is not None)
        if x is not None and y is not None:
            pair.changes = diff_records(x, y)
        pairs.append(pair)
    return RunDiff(run_a, run_b, _context(a, b), pairs)
