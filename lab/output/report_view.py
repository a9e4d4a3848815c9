"""`locklab report`'s page as data: a typed view model built from a run's records.

Everything the page shows is decided here (each scenario's section in
lab.output.scenario_view), from the records, the verdicts a verify run
saved, a `bench --scale` record and the pinned pictures; the template
(templates/report.html.j2) only lays it out. Charts arrive drawn (lab.output.svg) as
`Svg`, which the template inserts as markup; every other field is plain text that the
template escapes. Verdict counts are lab.verify's `summarize`, not counted again here.

Pure: records in, frozen dataclasses out (no file, no server, no clock unless asked).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.core.records import Record
from lab.output import svg as charts
from lab.output.diff import servers_text
from lab.output.scenario_view import (
    Badge,
    Chart,
    ClaimRow,
    Counts,
    Cycle,
    EvidenceRow,
    InvariantItem,
    Mark,
    ScenarioSection,
    Svg,
    Timeline,
    VariantRow,
    drawn,
    evidence_rows,
    record_verdicts,
    scenario_section,
)
from lab.output.trace_svg import Picture, draw
from lab.verify import ScenarioVerdicts, Summary, merge_cases, summarize

__all__ = [  # the section's types are the page's too
    "Badge",
    "BenchRow",
    "BenchSection",
    "Chart",
    "ClaimRow",
    "Counts",
    "Cycle",
    "EvidenceRow",
    "InvariantItem",
    "Mark",
    "Page",
    "ScenarioSection",
    "Svg",
    "Timeline",
    "VariantRow",
    "evidence_rows",
    "page_view",
]

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
PUBLISHED_NOTE = (
    "Published numbers: Node 24 + node-postgres on PostgreSQL 17.11 (deadlock_timeout=1s) "
    "and Redis 7.4.11, as printed in the source documents."
)


@dataclass(frozen=True)
class BenchRow:
    n: str
    via: str
    lab_ms: str
    pgbench_ms: str
    ratio: str
    target: str
    word: str  # within | ABOVE


@dataclass(frozen=True)
class BenchSection:
    rounds: str
    pgbench: str
    commit: str
    chart: Svg | None
    rows: tuple[BenchRow, ...]


@dataclass(frozen=True)
class Page:
    run_id: str
    kind: str  # "runs"; "bench": a bench --scale record only; "pinned": pictures only
    started: str
    servers: str
    lab_version: str
    lab_commit: str
    python: str
    profile: str  # "" unless a verify run
    summary: Summary
    counts: Counts
    sections: tuple[ScenarioSection, ...]
    bench: BenchSection | None
    pictures: tuple[Svg, ...]
    generated: str
    csp: str = CSP
    published_note: str = PUBLISHED_NOTE


# --- the page -------------------------------------------------------------------------


def variant_order(r: Record) -> tuple[str, int, str]:
    """Within a scenario: buggy first, its siblings, then fixed, then the other fixes."""
    v = str(r.get("variant"))
    rank = 0 if v == "buggy" else 1 if "buggy" in v else 2 if v == "fixed" else 3
    return (str(r.get("scenario")), rank, v)


def bench_section(bench: Mapping[str, Any]) -> BenchSection:
    """The scale curve of a `bench --scale` record, with its table."""
    points = list(bench.get("points") or [])
    rows = tuple(
        BenchRow(
            str(p["n"]),
            str(p.get("via", "")),
            charts.fmt_num(float(p["lab_median_ms"])),
            charts.fmt_num(float(p["pgbench_median_ms"])),
            f"{float(p['ratio']):.3f}",
            f"{float(p['target_ratio']):.2f}",
            "within" if float(p["ratio"]) <= float(p["target_ratio"]) else "ABOVE",
        )
        for p in points
    )
    return BenchSection(
        str(bench.get("rounds", "?")),
        str(bench.get("pgbench", "pgbench")),
        str(bench.get("git_commit") or "?"),
        drawn(charts.scale_chart(points)),
        rows,
    )


def page_view(
    records: Sequence[Record],
    run_id: str,
    verdicts: Sequence[ScenarioVerdicts] | None = None,
    bench: Mapping[str, Any] | None = None,
    pinned: Sequence[Picture] = (),
    generated: str | None = None,
) -> Page:
    """The whole page's view model (pure but for the clock, unless `generated` is given)."""
    by: dict[str, list[Record]] = {}
    for r in sorted(records, key=variant_order):
        by.setdefault(str(r["scenario"]), []).append(r)
    shown = {v.scenario: v for v in merge_cases(verdicts or [])}
    first = records[0] if records else {}
    lab = first.get("lab") or {}
    profile = str((first.get("verify") or {}).get("profile") or "")
    sections, counted = [], []
    for sc_id, recs in by.items():
        own = [v for v in verdicts or [] if v.scenario == sc_id]  # its cases too, unmerged
        if not own:
            own = [record_verdicts(sc_id, recs)]
        sections.append(scenario_section(sc_id, recs, shown.get(sc_id) or own[0], own))
        counted += own
    summary = summarize(counted, profile)
    kind = "runs"
    if not records and bench is not None:  # a bench run: no scenario, no claims to count
        kind = "bench"
    elif not records and pinned:  # a trace or an explore: no claims to count
        kind = "pinned"
    return Page(
        run_id=run_id,
        kind=kind,
        started=min((str(r.get("started_at", "")) for r in records), default=""),
        servers=servers_text(first),
        lab_version=str(lab.get("version", "?")),
        lab_commit=str(lab.get("git_commit") or "?"),
        python=str(lab.get("python", "?")),
        profile=profile,
        summary=summary,
        counts=Counts.of(summary),
        sections=tuple(sections),
        bench=None if bench is None else bench_section(bench),
        # each at its own size: shrunk to the column, a long run's labels would be too
        # small to read, so the picture scrolls instead (the template's div.pinned)
        pictures=tuple(Svg(draw([p])) for p in pinned),
        generated=generated or dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        # the documents' setup, said only where the page shows a number they published
        published_note=PUBLISHED_NOTE if _shows_published(sections) else "",
    )


def _shows_published(sections: Sequence[ScenarioSection]) -> bool:
    """Whether a section quotes a published number (a scenario of the user's own: none)."""
    return any(row.published for s in sections for row in s.variants) or any(
        c.published for s in sections for c in s.claims
    )
