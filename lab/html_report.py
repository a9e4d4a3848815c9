"""`locklab report RUN`: one self-contained HTML page with inline SVG charts.

No network, no external scripts or fonts: charts are SVG drawn here, styles are inline,
and a Content-Security-Policy forbids anything else. One tiny inline script marks the
page as rendered (and counts script errors) so a headless browser test can check it.

Per scenario the page shows: measured beside published (table), outcome counts per
variant beside the published counts, wall time measured vs published, latency
distributions (overall and per outcome), attempts per transfer, server evidence
(deadlock cycle lengths, Redis command counts, counters), the lease timeline (who held
the lock when, by belief and by Redis), invariants and claim verdicts. It renders what a
record has and skips what it lacks. The run's trace and explore records add a picture of
each pinned run they keep (lab/trace_svg.py).
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.diff import servers_text
from lab.published import Measured, at_size
from lab.report import REDIS_HARNESS, measured_text
from lab.results import load_run, read_record, run_folder, write_text
from lab.trace_svg import Picture, draw
from lab.verify import ScenarioVerdicts, load_verdicts, merge_cases, status_of

Record = Mapping[str, Any]

WIDTH = 860  # SVG width in px; the page column is a little wider
ROW_H = 22
LABEL_CHARS_PX = 7.0
OUTCOME_COLOURS = {
    "ok": "#2e7d32",
    "40P01": "#c62828",
    "40001": "#ef6c00",
    "55P03": "#6a1b9a",
    "23505": "#8d6e63",
    "timeout": "#616161",
}
PALETTE = ("#1565c0", "#f9a825", "#00838f", "#ad1457", "#4e342e", "#558b2f", "#5e35b1", "#00695c")
PUBLISHED_COLOUR = "#9e9e9e"
WHO_COLOURS = ("#1565c0", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#558b2f")
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
CHECK_SCRIPT = """
(function () {
  var errors = [];
  window.addEventListener('error', function (e) { errors.push(String(e.message)); });
  document.addEventListener('securitypolicyviolation', function (e) {
    errors.push('csp: ' + e.violatedDirective + ' ' + e.blockedURI);
  });
  window.addEventListener('load', function () {
    var d = document.documentElement;
    d.setAttribute('data-svg-count', String(document.querySelectorAll('svg').length));
    d.setAttribute('data-errors', errors.length ? errors.join(' | ') : 'none');
    d.setAttribute('data-rendered', 'ok');
  });
})();
"""
STYLE = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #212121; background: #fafafa; margin: 0; }
main { max-width: 960px; margin: 0 auto; padding: 24px 20px 60px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 0 0 2px; }
h3 { font-size: 15px; margin: 22px 0 6px; color: #424242; }
.meta { color: #616161; font-size: 13px; }
section.scenario { background: #fff; border: 1px solid #e0e0e0; border-radius: 8px;
                   padding: 18px 20px; margin: 22px 0; }
table { border-collapse: collapse; width: 100%; font-size: 13px; margin: 6px 0; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #eeeeee;
         vertical-align: top; }
th { color: #616161; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace;
              font-size: 12px; }
.pub { color: #757575; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px;
         font-weight: 600; white-space: nowrap; }
.held { background: #e8f5e9; color: #1b5e20; }
.not { background: #ffebee; color: #b71c1c; }
.nj { background: #fff8e1; color: #8d6e00; }
.na { background: #f5f5f5; color: #757575; }
.summary { font-size: 16px; margin: 14px 0; }
svg { display: block; max-width: 100%; height: auto; margin: 4px 0 10px; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
.note { color: #757575; font-size: 12px; }
ul.inv { margin: 4px 0; padding-left: 18px; }
nav a { margin-right: 12px; }
table.marks { width: auto; }
div.pinned { overflow-x: auto; }
div.pinned svg { max-width: none; }
"""


# --- published numbers ---------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    text: str
    outcomes: dict[str, int] | None
    wall_ms: float | None
    attempts: int | None
    n: int | None
    figures: Mapping[str, float] = field(default_factory=dict)  # "GETs=2739" -> {"GETs": 2739}


def parse_published(text: str, n: int | None = None) -> Published | None:
    """The document's line for a variant, as numbers: outcome counts, wall ms, attempts.

    A line may list several sizes (`... (n=200); ... (n=40)`): the one matching the run's
    n is chosen, else the first.
    """
    if not text:
        return None
    segments = [s.strip() for s in text.split(";") if s.strip()]
    chosen = segments[0]
    for s in segments:
        m = re.search(r"\(n=(\d+)\)", s)
        if m and n is not None and int(m[1]) == n:
            chosen = s
            break
    outcomes = None
    m = re.search(r"\{[^{}]*\}", chosen)
    if m:
        try:
            raw = json.loads(m[0])
            if isinstance(raw, dict) and all(isinstance(v, int) for v in raw.values()):
                outcomes = {str(k): int(v) for k, v in raw.items()}
        except ValueError:
            outcomes = None
    wall = None
    m = re.search(r"\bin\s+([\d.]+)\s*(ms|s)\b", chosen) or re.search(
        r",\s*([\d.]+)\s*(ms|s)\s*$", chosen
    )  # "in 99403 ms", or a trailing ", 597 ms"
    if m:
        wall = float(m[1]) * (1 if m[2] == "ms" else 1000)
    figures = {
        k.strip(): float(v)
        for k, v in re.findall(r"([A-Za-z][A-Za-z ]*?)\s*=\s*(\d+(?:\.\d+)?)", chosen)
    }
    attempts = int(figures["attempts"]) if "attempts" in figures else None
    m = re.search(r"\(n=(\d+)\)", chosen)
    size = int(m[1]) if m else (sum(outcomes.values()) if outcomes else None)
    return Published(chosen, outcomes, wall, attempts, size, figures)


def published_of(rec: Record, n: int | None) -> Published | None:
    """The document's run for this record's variant at size `n`: from the numbers the
    scenario declared (lab.published, in the record), else, for records made before
    those existed, parsed from the published line."""
    declared = [Measured.from_json(m) for m in rec.get("published_measured") or []]
    m = at_size(declared, n)
    if m is None:
        return parse_published(str(rec.get("published") or ""), n)
    return Published(
        m.text(),
        None if m.outcomes is None else dict(m.outcomes),
        m.wall_ms,
        m.attempts,
        m.n if m.n is not None else (sum(m.outcomes.values()) if m.outcomes else None),
        dict(m.figures),
    )


# --- SVG building blocks -------------------------------------------------------------


def esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def fmt_num(v: float) -> str:
    if v >= 1_000_000:
        return f"{v / 1_000_000:.3g}M"
    if v >= 10_000:
        return f"{v / 1000:.0f}k"
    if v >= 1000:
        return f"{v / 1000:.3g}k"
    if v >= 10 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.2g}"


@dataclass(frozen=True)
class Scale:
    """Maps a value to x; linear from 0, or log10 when the values span decades."""

    lo: float
    hi: float
    x0: float
    x1: float
    log: bool = False

    @classmethod
    def fit(cls, values: Sequence[float], x0: float, x1: float, log_ratio: float = 50) -> Scale:
        vals = [v for v in values if v is not None and v > 0]
        if not vals:
            return cls(0, 1, x0, x1)
        hi, lo = max(vals), min(vals)
        if hi / lo > log_ratio:
            return cls(
                10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi)), x0, x1, True
            )
        step = _nice_step(hi)
        return cls(0, math.ceil(hi / step) * step, x0, x1)

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, self.lo)
            f = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            f = (v - self.lo) / (self.hi - self.lo) if self.hi > self.lo else 0
        return self.x0 + max(0.0, min(1.0, f)) * (self.x1 - self.x0)

    def ticks(self) -> list[float]:
        if self.log:
            a, b = round(math.log10(self.lo)), round(math.log10(self.hi))
            return [10.0**e for e in range(a, b + 1)]
        step = _nice_step(self.hi)
        return [i * step for i in range(round(self.hi / step) + 1)]


def _nice_step(hi: float, count: int = 5) -> float:
    if hi <= 0:
        return 1.0
    raw = hi / count
    base = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= base * m:
            return base * m
    return base * 10


def svg(width: float, height: float, body: str, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{esc(label)}">'
        f"<title>{esc(label)}</title>{body}</svg>"
    )


def text(x: float, y: float, s: object, *, anchor: str = "start", size: int = 12,
         fill: str = "#424242", weight: str = "normal") -> str:  # fmt: skip
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" '
        f'fill="{fill}" font-weight="{weight}">{esc(s)}</text>'
    )


def rect(x: float, y: float, w: float, h: float, fill: str, tip: str = "", extra: str = "") -> str:
    title = f"<title>{esc(tip)}</title>" if tip else ""
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{h:.1f}" '
        f'fill="{fill}" {extra}>{title}</rect>'
    )


def line(x1: float, y1: float, x2: float, y2: float, stroke: str = "#bdbdbd", width: float = 1,
         dash: str = "") -> str:  # fmt: skip
    d = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
        f'stroke="{stroke}" stroke-width="{width}"{d}/>'
    )


def axis(scale: Scale, y_top: float, y_bottom: float, unit: str = "") -> str:
    parts = []
    for t in scale.ticks():
        x = scale(t)
        parts.append(line(x, y_top, x, y_bottom, "#eeeeee"))
        parts.append(text(x, y_bottom + 14, fmt_num(t), anchor="middle", size=11, fill="#757575"))
    if unit:
        suffix = " (log scale)" if scale.log else ""
        parts.append(
            text(scale.x1, y_bottom + 28, unit + suffix, anchor="end", size=11, fill="#757575")
        )
    return "".join(parts)


def label_width(labels: Sequence[str]) -> float:
    return min(260.0, max([60.0, *(len(s) * LABEL_CHARS_PX + 14 for s in labels)]))


def outcome_colour(key: str, order: Sequence[str]) -> str:
    if key in OUTCOME_COLOURS:
        return OUTCOME_COLOURS[key]
    others = [k for k in order if k not in OUTCOME_COLOURS]
    return PALETTE[others.index(key) % len(PALETTE)] if key in others else PALETTE[0]


def variant_colour(variant: str, variants: Sequence[str]) -> str:
    """Buggy variants in reds and oranges, fixes in greens and blues, stable per page."""
    family = (
        ("#c62828", "#ef6c00", "#ad1457", "#8d6e63")
        if "buggy" in variant
        else ("#2e7d32", "#1565c0", "#00838f", "#558b2f", "#5e35b1", "#00695c")
    )
    same = [v for v in variants if ("buggy" in v) == ("buggy" in variant)]
    return family[same.index(variant) % len(family)] if variant in same else family[0]


# --- charts --------------------------------------------------------------------------


def outcome_chart(rows: Sequence[tuple[str, Mapping[str, int], bool]]) -> str:
    """Stacked bars, one per row, as shares of the row's actors; counts written in."""
    if not rows:
        return ""
    keys: list[str] = []
    for _, counts, _ in rows:
        keys += [k for k in counts if k not in keys]
    lw = label_width([r[0] for r in rows])
    x0, x1 = lw, WIDTH - 70
    body = []
    y = 8.0
    for label, counts, published in rows:
        total = sum(counts.values()) or 1
        body.append(
            text(x0 - 8, y + 15, label, anchor="end", fill="#757575" if published else "#212121")
        )
        x = x0
        for k in keys:
            c = counts.get(k, 0)
            if not c:
                continue
            w = (x1 - x0) * c / total
            fill = outcome_colour(k, keys)
            op = ' fill-opacity="0.45"' if published else ""
            body.append(rect(x, y + 2, w, ROW_H - 4, fill, f"{label}: {k} = {c} of {total}", op))
            if w > 34:
                body.append(text(x + w / 2, y + 15, f"{k} {c}" if w > 70 else str(c),
                                 anchor="middle", size=11, fill="#ffffff", weight="600"))  # fmt: skip
            x += w
        body.append(text(x1 + 6, y + 15, f"n={total}", size=11, fill="#757575"))
        y += ROW_H + (6 if published else 2)
    lx = x0
    for k in keys:
        body.append(rect(lx, y + 6, 10, 10, outcome_colour(k, keys)))
        body.append(text(lx + 14, y + 15, k, size=11))
        lx += 24 + len(k) * 7
    if any(published for _, _, published in rows):
        body.append(text(x1, y + 15, "faded bars: the document's published counts",
                         anchor="end", size=11, fill="#9e9e9e"))  # fmt: skip
    return svg(WIDTH, y + 24, "".join(body), "outcome counts per variant, measured and published")


def bar_chart(rows: Sequence[tuple[str, float, str, str]], unit: str, title: str) -> str:
    """Horizontal bars: (label, value, colour, tooltip); log scale when values span decades."""
    rows = [r for r in rows if r[1] is not None]
    if not rows:
        return ""
    lw = label_width([r[0] for r in rows])
    x0, x1 = lw, WIDTH - 70
    scale = Scale.fit([r[1] for r in rows], x0, x1)
    h = 8 + len(rows) * ROW_H
    body = [axis(scale, 4, h, unit)]
    y = 8.0
    for label, value, colour, tip in rows:
        body.append(text(x0 - 8, y + 15, label, anchor="end"))
        w = scale(value) - x0
        body.append(rect(x0, y + 3, w, ROW_H - 6, colour, tip or f"{label}: {value:g} {unit}"))
        body.append(text(x0 + w + 5, y + 15, fmt_num(value), size=11, fill="#424242"))
        y += ROW_H
    return svg(WIDTH, h + 34, "".join(body), title)


def latency_chart(rows: Sequence[tuple[str, Mapping[str, float], str]], unit: str = "ms") -> str:
    """A box per row: whisker min–max, box p50–p95, tick at p99, dot at p50."""
    rows = [r for r in rows if r[1]]
    if not rows:
        return ""
    lw = label_width([r[0] for r in rows])
    x0, x1 = lw, WIDTH - 70
    values = [v for _, p, _ in rows for v in p.values() if isinstance(v, (int, float))]
    scale = Scale.fit(values, x0, x1, log_ratio=200)
    h = 8 + len(rows) * ROW_H
    body = [axis(scale, 4, h, unit)]
    y = 8.0
    for label, p, colour in rows:
        mid = y + ROW_H / 2
        body.append(text(x0 - 8, y + 15, label, anchor="end"))
        lo, hi = p.get("min", p.get("p50", 0)), p.get("max", p.get("p99", 0))
        tip = f"{label}: " + ", ".join(f"{k} {v:g}" for k, v in p.items()) + f" {unit}"
        body.append(line(scale(lo), mid, scale(hi), mid, colour, 1.5))
        if "p50" in p and "p95" in p:
            a, b = scale(p["p50"]), scale(p["p95"])
            body.append(
                rect(a, y + 5, max(b - a, 2), ROW_H - 10, colour, tip, 'fill-opacity="0.35"')
            )
        if "p99" in p:
            x = scale(p["p99"])
            body.append(line(x, y + 4, x, y + ROW_H - 4, colour, 2))
        if "p50" in p:
            body.append(
                f'<circle cx="{scale(p["p50"]):.1f}" cy="{mid:.1f}" r="4" fill="{colour}">'
                f"<title>{esc(tip)}</title></circle>"
            )
        body.append(text(scale(hi) + 5, y + 15, f"p50 {fmt_num(p.get('p50', 0))}", size=11,
                         fill="#757575"))  # fmt: skip
        y += ROW_H
    return svg(WIDTH, h + 34, "".join(body), f"distribution per row ({unit})")


@dataclass(frozen=True)
class EvidenceRow:
    """One measured quantity across variants, with the document's value where it has one."""

    name: str
    values: Mapping[str, float]  # variant -> value
    published: Mapping[str, float]  # variant -> the document's value


# Names the documents use for a figure -> the evidence rows that measure it.
FIGURE_ALIASES = {"gets": ("redis:get", "redis_get"), "db calls": ("db_calls",)}


def evidence_rows(
    recs: Sequence[Record], pubs: Mapping[str, Published | None]
) -> list[EvidenceRow]:
    """Deadlocks, cycle lengths, Redis command counts and counters, in that order."""
    rows: list[tuple[str, str, dict[str, float]]] = []  # (key, name, values)

    def ev(r: Record) -> Mapping[str, Any]:
        return r.get("evidence") or {}

    if any("pg_stat_deadlocks" in ev(r) for r in recs):
        vals = {str(r["variant"]): float(ev(r).get("pg_stat_deadlocks") or 0) for r in recs}
        if any(vals.values()):
            rows.append(("pg_deadlocks", "PostgreSQL deadlocks (pg_stat_database)", vals))
    lengths = sorted(
        {str(k) for r in recs for k in ((ev(r).get("deadlocks") or {}).get("cycle_lengths") or {})},
        key=lambda k: int(k) if k.isdigit() else 0,
    )
    for k in lengths:
        vals = {
            str(r["variant"]): float(
                ((ev(r).get("deadlocks") or {}).get("cycle_lengths") or {}).get(k, 0)
            )
            for r in recs
        }
        rows.append((f"cycle:{k}", f"deadlock cycles of {k} processes (server log)", vals))
    cmds = sorted(
        {c for r in recs for c in (ev(r).get("redis_commandstats") or {})} - REDIS_HARNESS
    )
    for c in cmds:
        vals = {
            str(r["variant"]): float((ev(r).get("redis_commandstats") or {}).get(c, 0))
            for r in recs
        }
        rows.append((f"redis:{c}", f"Redis {c.upper()} calls", vals))
    names = sorted({k for r in recs for k in (r.get("counters") or {}) if k != "attempts"})
    for k in names:
        vals = {}
        for r in recs:
            x = (r.get("counters") or {}).get(k)
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                vals[str(r["variant"])] = float(x)
        if vals:
            rows.append((k, k.replace("_", " "), vals))
    out = []
    for key, name, vals in rows:
        published = {}
        for v, pub in pubs.items():
            for fig, value in (pub.figures if pub else {}).items():
                for alias, keys in FIGURE_ALIASES.items():
                    if fig.lower().endswith(alias) and key in keys:  # "redis GETs" -> "gets"
                        published[v] = value
        out.append(EvidenceRow(name, vals, published))
    return out


def matrix_chart(rows: Sequence[EvidenceRow], variants: Sequence[str]) -> str:
    """Rows of measures, one column per variant: a bar scaled to the row's largest value."""
    if not rows:
        return ""
    lw = label_width([r.name for r in rows]) + 10
    cw = (WIDTH - lw) / max(1, len(variants))
    bar_max = max(30.0, cw - 58)
    head = 22.0
    rh = 20.0
    body = []
    for j, v in enumerate(variants):
        x = lw + j * cw
        body.append(text(x, 14, v, size=11, fill=variant_colour(v, variants), weight="600"))
    for i, row in enumerate(rows):
        y = head + i * rh
        if i % 2 == 0:
            body.append(rect(0, y, WIDTH, rh, "#f5f5f5"))
        body.append(text(lw - 10, y + 14, row.name, anchor="end", size=11))
        top = max([*row.values.values(), *row.published.values(), 0.0]) or 1.0
        for j, v in enumerate(variants):
            x = lw + j * cw
            if v not in row.values:
                body.append(text(x, y + 14, "-", size=11, fill="#9e9e9e"))
                continue
            value = row.values[v]
            w = bar_max * value / top
            body.append(rect(x, y + 4, max(w, 1), rh - 8, variant_colour(v, variants),
                             f"{row.name} — {v}: {value:g}"))  # fmt: skip
            label = fmt_num(value)
            if v in row.published:
                px = x + bar_max * row.published[v] / top
                body.append(line(px, y + 1, px, y + rh - 1, "#616161", 2))
                label += f" ({fmt_num(row.published[v])})"
            body.append(text(x + max(w, 1) + 4, y + 14, label, size=11))
    return svg(WIDTH, head + len(rows) * rh + 6, "".join(body), "server-side evidence per variant")


def _timeline_parts(
    tl: Mapping[str, Any],
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]], list[str]]:
    spans = [
        s for s in tl.get("spans", []) if _is_num(s.get("start_ms")) and _is_num(s.get("end_ms"))
    ]
    marks = sorted(
        (m for m in tl.get("marks", []) if _is_num(m.get("t_ms"))), key=lambda m: float(m["t_ms"])
    )
    who = sorted({str(x.get("who")) for x in [*spans, *marks]})
    return spans, marks, who


def timeline_chart(tl: Mapping[str, Any], title: str) -> str:
    """Swimlanes: per actor, when it believed it held the lock and when Redis said it did.

    Red bands mark times when two different actors believed they held the lock at once;
    numbered dots are the events listed under the chart.
    """
    spans, marks, who = _timeline_parts(tl)
    if not spans and not marks:
        return ""
    unit = str(tl.get("unit", "ms"))
    kinds = [k for k in ("belief", "redis") if any(s.get("kind") == k for s in spans)] or ["belief"]
    kinds += sorted({str(s.get("kind")) for s in spans} - set(kinds))
    lanes = [(w, k) for w in who for k in kinds]
    names = {"redis": "Redis says", "belief": "believes"}
    lane_labels = [f"{w} · {names.get(k, k)}" for w, k in lanes]
    lw = label_width(lane_labels)
    x0, x1 = lw + 10, WIDTH - 20
    t_end = max([float(s["end_ms"]) for s in spans] + [float(m["t_ms"]) for m in marks] + [1.0])
    step = _nice_step(t_end, 8)
    scale = Scale(0, math.ceil(t_end / step) * step, x0, x1)
    top = 40.0
    lane_h = 24.0
    group_h = lane_h * len(kinds)
    h = top + len(lanes) * lane_h
    body = [axis(scale, top - 4, h, unit)]
    for a, b in _overlaps([s for s in spans if s.get("kind") == "belief"]):
        body.append(rect(scale(a), top - 4, scale(b) - scale(a), h - top + 4, "#ffcdd2",
                         f"two holders at once: {a:g}–{b:g} {unit}", 'fill-opacity="0.7"'))  # fmt: skip
        body.append(text((scale(a) + scale(b)) / 2, top - 8, "both hold", anchor="middle",
                         size=11, fill="#c62828", weight="600"))  # fmt: skip
    for i, ((w, k), lab) in enumerate(zip(lanes, lane_labels, strict=True)):
        y = top + i * lane_h
        if k == kinds[0] and i:
            body.append(line(8, y, x1, y, "#e0e0e0"))
        body.append(text(x0 - 8, y + 16, lab, anchor="end", size=11))
        colour = WHO_COLOURS[who.index(w) % len(WHO_COLOURS)]
        for s in spans:
            if str(s.get("who")) != w or str(s.get("kind")) != k:
                continue
            a, b = scale(float(s["start_ms"])), scale(float(s["end_ms"]))
            lab_s = str(s.get("label", ""))
            tip = f"{w} {k}: {float(s['start_ms']):g}–{float(s['end_ms']):g} {unit} {lab_s}"
            style = "" if k == "redis" else (
                f'fill-opacity="0.25" stroke="{colour}" stroke-dasharray="4 2"'
            )  # fmt: skip
            body.append(rect(a, y + 5, b - a, lane_h - 10, colour, tip.strip(), style))
            if lab_s and b - a > len(lab_s) * 6.2 + 6:
                fill = "#ffffff" if k == "redis" else "#212121"
                body.append(text((a + b) / 2, y + 16, lab_s, anchor="middle", size=10, fill=fill))
    # events close in time share one numbered pill ("1–4") instead of overlapping dots
    clusters: list[tuple[str, float, list[int]]] = []  # (who, x, event numbers)
    for n, m in enumerate(marks, start=1):
        w, x = str(m.get("who")), scale(float(m["t_ms"]))
        same = [c for c in clusters if c[0] == w]
        if same and x - same[-1][1] < 16:
            same[-1][2].append(n)
        else:
            clusters.append((w, x, [n]))
        g = who.index(w)
        body.append(line(x, top + g * group_h + 2, x, top + (g + 1) * group_h - 2,
                         WHO_COLOURS[g % len(WHO_COLOURS)], 1.5))  # fmt: skip
    for w, x, nums in clusters:
        g = who.index(w)
        colour = WHO_COLOURS[g % len(WHO_COLOURS)]
        label = str(nums[0]) if len(nums) == 1 else f"{nums[0]}–{nums[-1]}"
        pw = max(13.0, 6 + len(label) * 5.6)
        cy = top + g * group_h + 7
        tip = "; ".join(
            f"{n}. {w} at {float(marks[n - 1]['t_ms']):g} {unit}: {marks[n - 1].get('label', '')}"
            for n in nums
        )
        body.append(rect(x - pw / 2, cy - 6.5, pw, 13, colour, tip, 'rx="6.5" stroke="#ffffff"'))
        body.append(text(x, cy + 3.5, label, anchor="middle", size=9, fill="#ffffff", weight="700"))
    legend_y = h + 40
    dashed = 'fill-opacity="0.25" stroke="#607d8b" stroke-dasharray="4 2"'
    body.append(rect(x0, legend_y - 9, 18, 10, "#90a4ae", "", dashed))
    body.append(text(x0 + 24, legend_y, "believes it holds the lock", size=11))
    body.append(rect(x0 + 200, legend_y - 9, 18, 10, "#607d8b"))
    body.append(text(x0 + 224, legend_y, "Redis has its token", size=11))
    body.append(rect(x0 + 360, legend_y - 9, 18, 10, "#ffcdd2"))
    body.append(text(x0 + 384, legend_y, "two actors believe they hold it", size=11))
    return svg(WIDTH, legend_y + 10, "".join(body), title)


def marks_table(tl: Mapping[str, Any]) -> str:
    """The numbered events of a timeline, in time order, as a compact table."""
    _, marks, who = _timeline_parts(tl)
    if not marks:
        return ""
    unit = str(tl.get("unit", "ms"))
    rows = []
    for n, m in enumerate(marks, start=1):
        w = str(m.get("who"))
        colour = WHO_COLOURS[who.index(w) % len(WHO_COLOURS)]
        rows.append(
            f"<tr><td class='num'>{n}</td><td class='num'>{float(m['t_ms']):.1f} {esc(unit)}</td>"
            f"<td><b style='color:{colour}'>{esc(w)}</b></td><td class='mono'>"
            f"{esc(m.get('label', ''))}</td></tr>"
        )
    return (
        "<table class='marks'><tr><th>#</th><th>t</th><th>who</th><th>event</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _is_num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _overlaps(beliefs: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """Intervals where spans of two different actors intersect, merged."""
    found: list[tuple[float, float]] = []
    for i, s in enumerate(beliefs):
        for t in beliefs[i + 1 :]:
            if s.get("who") == t.get("who"):
                continue
            a = max(float(s["start_ms"]), float(t["start_ms"]))
            b = min(float(s["end_ms"]), float(t["end_ms"]))
            if b > a:
                found.append((a, b))
    merged: list[tuple[float, float]] = []
    for a, b in sorted(found):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


# --- page ----------------------------------------------------------------------------


def _badge(v: Mapping[str, Any]) -> str:
    status = status_of(v)
    cls = {"held": "held", "not held": "not", "not judged": "nj"}.get(status, "na")
    word = status.upper() if status in ("not held", "fitted", "not reproduced") else status
    return f'<span class="badge {cls}">{esc(word)}</span>'


def _scenario_claims(
    recs: Sequence[Record], verdicts: ScenarioVerdicts | None
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    if verdicts is not None:
        return list(verdicts.verdicts), list(verdicts.skipped)
    seen: dict[tuple[str, str], Mapping[str, Any]] = {}
    skipped: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in recs:
        for c in r.get("claims", []):
            seen.setdefault((c["id"], c["text"]), c)
        for c in r.get("claims_not_judged", []):
            skipped.setdefault((c["id"], c["text"]), c)
    return list(seen.values()), list(skipped.values())


def _claims_html(claims: Sequence[Mapping[str, Any]], skipped: Sequence[Mapping[str, Any]]) -> str:
    if not claims and not skipped:
        return '<p class="note">No claim was judged on this run.</p>'
    rows = []
    for c in claims:
        trials = c.get("trials")
        t = (
            f"{c['trials_held']}/{len(trials)}"
            if isinstance(trials, list) and len(trials) > 1
            else "1"
        )
        rows.append(
            f"<tr><td class='mono'>{esc(c['id'])}</td><td>{_badge(c)}</td><td class='num'>{t}</td>"
            f"<td>{esc(c['text'])}</td><td class='mono'>{esc(c['measured'])}</td>"
            f"<td class='pub mono'>{esc(c.get('published') or '')}</td></tr>"
        )
    for c in skipped:
        # verify: a claim of another profile; run/compare: a claim these settings can't judge
        badge = f"{'+'.join(c['profiles'])} only" if c.get("profiles") else "not judged here"
        rows.append(
            f"<tr><td class='mono'>{esc(c['id'])}</td><td><span class='badge na'>"
            f"{esc(badge)}</span></td><td class='num'>-</td><td class='pub'>{esc(c['text'])}</td>"
            f"<td class='pub'>{esc(c.get('why') or '')}</td>"
            f"<td class='pub mono'>{esc(c.get('published') or '')}</td></tr>"
        )
    return (
        "<table><tr><th>id</th><th>verdict</th><th>trials</th><th>claim</th>"
        "<th>measured</th><th>published</th></tr>" + "".join(rows) + "</table>"
    )


def scenario_section(sc_id: str, recs: Sequence[Record], verdicts: ScenarioVerdicts | None) -> str:
    first = recs[0]
    variants = [str(r["variant"]) for r in recs]
    knobs = first.get("knobs") or {}
    n = knobs.get("n")
    pubs = {str(r["variant"]): published_of(r, n) for r in recs}
    parts = [f'<section class="scenario" id="{esc(sc_id)}">']
    parts.append(f"<h2>{esc(sc_id)}</h2><div class='meta'>{esc(first.get('title', ''))}</div>")
    knob_line = " ".join(f"{k}={v}" for k, v in knobs.items())
    params = " ".join(f"{k}={v}" for k, v in (first.get("params") or {}).items())
    parts.append(
        f"<div class='meta mono'>{esc(knob_line)}{'  ·  ' + esc(params) if params else ''}</div>"
    )

    # measured vs published
    rows = []
    for r in recs:
        inv = r.get("invariants") or []
        bad = [i for i in inv if not i["held"]]
        inv_s = (
            f"<span class='badge not'>{len(bad)} broken</span>" if bad
            else f"<span class='badge held'>{len(inv)} held</span>" if inv else "-"
        )  # fmt: skip
        lat = r.get("latency_ms") or {}
        p = f"{lat.get('p50', 0):.0f} / {lat.get('p99', 0):.0f}" if lat else "-"
        rows.append(
            f"<tr><td><b>{esc(r['variant'])}</b></td><td class='mono'>{esc(measured_text(r))}</td>"
            f"<td class='num'>{p}</td><td>{inv_s}</td>"
            f"<td class='pub mono'>{esc(r.get('published') or '')}</td></tr>"
        )
    parts.append(
        "<h3>Measured beside published</h3><table><tr><th>variant</th><th>measured</th>"
        "<th>p50 / p99 ms</th><th>invariants</th><th>published</th></tr>"
        + "".join(rows)
        + "</table>"
    )

    # outcome counts
    orows: list[tuple[str, Mapping[str, int], bool]] = []
    for r in recs:
        v = str(r["variant"])
        orows.append((f"{v}", r.get("outcomes") or {}, False))
        pub = pubs.get(v)
        if pub is not None and pub.outcomes:
            orows.append((f"{v} · published", pub.outcomes, True))
    if any(sum(c.values()) for _, c, _ in orows):
        parts.append("<h3>Outcome counts</h3>" + outcome_chart(orows))

    # wall time
    wrows: list[tuple[str, float, str, str]] = []
    for r in recs:
        v = str(r["variant"])
        wrows.append((v, float(r.get("wall_ms", 0)), variant_colour(v, variants), ""))
        pub = pubs.get(v)
        if pub is not None and pub.wall_ms is not None:
            wrows.append((f"{v} · published", pub.wall_ms, PUBLISHED_COLOUR, pub.text))
    parts.append("<h3>Wall time</h3>" + bar_chart(wrows, "ms", "wall time, measured and published"))
    if n is not None and any(p is not None and p.n not in (None, n) for p in pubs.values()):
        parts.append(
            f"<p class='note'>This run used n={esc(n)}; the published numbers were measured at "
            "the document's size, so compare shapes, not absolute values.</p>"
        )

    # latency
    lrows: list[tuple[str, Mapping[str, float], str]] = []
    for r in recs:
        v = str(r["variant"])
        colour = variant_colour(v, variants)
        by = r.get("latency_ms_by_outcome") or {}
        if r.get("latency_ms"):
            lrows.append((f"{v} (all)", r["latency_ms"], colour))
        if len(by) > 1:
            for k, pct in by.items():
                lrows.append((f"{v} · {k}", pct, colour))
    if lrows:
        parts.append(
            "<h3>Latency per actor</h3>" + latency_chart(lrows)
            + "<p class='note'>line: min–max · box: p50–p95 · dot: p50 · tick: p99</p>"
        )  # fmt: skip

    # attempts
    arows: list[tuple[str, float, str, str]] = []
    dist: list[tuple[str, Mapping[str, float], str]] = []
    for r in recs:
        v = str(r["variant"])
        total = (r.get("counters") or {}).get("attempts")
        per = (r.get("samples") or {}).get("attempts_per_transfer") or {}
        if total is None and per:
            total = per.get("sum")
        if total is not None:
            arows.append((v, float(total), variant_colour(v, variants), ""))
            pub = pubs.get(v)
            if pub is not None and pub.attempts is not None:
                arows.append((f"{v} · published", float(pub.attempts), PUBLISHED_COLOUR, pub.text))
        if per:
            dist.append((v, {k: float(per[k]) for k in ("min", "p50", "p95", "p99", "max") if k in per},
                         variant_colour(v, variants)))  # fmt: skip
    if arows:
        parts.append("<h3>Attempts</h3>" + bar_chart(arows, "attempts", "attempts per variant"))
    if dist:
        parts.append(
            "<h3>Attempts per transfer</h3>" + latency_chart(dist, "attempts per transfer")
        )

    # evidence
    ev_rows = evidence_rows(recs, pubs)
    if ev_rows:
        parts.append(
            "<h3>Evidence from the servers</h3>"
            + matrix_chart(ev_rows, variants)
            + "<p class='note'>bars are scaled per row; grey ticks and (numbers) are the "
            "document's published values where it gives them</p>"
        )
    examples = [
        (str(r["variant"]), ((r.get("evidence") or {}).get("deadlocks") or {}).get("example"))
        for r in recs
    ]
    for v, ex in examples:
        if ex and ex.get("waits"):
            hops = " → ".join(
                f"{w.get('pid')} ({w.get('mode')} on {w.get('on')})" for w in ex["waits"]
            )
            parts.append(
                f"<p class='note'>{esc(v)}: one reported cycle: <span class='mono'>{esc(hops)}</span></p>"
            )

    # timelines
    for r in recs:
        tl = (r.get("evidence") or {}).get("timeline")
        if isinstance(tl, Mapping):
            chart = timeline_chart(tl, f"lease timeline, {r['variant']}")
            if chart:
                parts.append(
                    f"<h3>Lease timeline — {esc(r['variant'])}</h3>" + chart + marks_table(tl)
                )

    # invariants
    inv_items = []
    for r in recs:
        for i in r.get("invariants") or []:
            mark = "✓" if i["held"] else "✗"
            cls = "held" if i["held"] else "not"
            inv_items.append(
                f"<li><span class='badge {cls}'>{mark}</span> <b>{esc(r['variant'])}</b>: "
                f"{esc(i['name'])} <span class='note'>({esc(i.get('detail', ''))})</span></li>"
            )
    if inv_items:
        parts.append("<h3>Invariants</h3><ul class='inv'>" + "".join(inv_items) + "</ul>")

    claims, skipped = _scenario_claims(recs, verdicts)
    parts.append("<h3>Claims</h3>" + _claims_html(claims, skipped))
    parts.append("</section>")
    return "".join(parts)


def _variant_order(r: Record) -> tuple[str, int, str]:
    """Within a scenario: buggy first, its siblings, then fixed, then the other fixes."""
    v = str(r.get("variant"))
    rank = 0 if v == "buggy" else 1 if "buggy" in v else 2 if v == "fixed" else 3
    return (str(r.get("scenario")), rank, v)


def scale_chart(points: Sequence[Mapping[str, Any]]) -> str:
    """`bench --scale`'s curve: lab / pgbench at each n (one column per n, in run order),
    the target of each n dashed, 1.0 (the lab costs nothing) as the baseline."""
    if not points:
        return ""
    w, h, left, right, top, bottom = 640.0, 240.0, 56.0, 16.0, 16.0, 44.0
    ratios = [float(p["ratio"]) for p in points] + [float(p["target_ratio"]) for p in points]
    lo = min(0.95, math.floor(min(ratios) * 20) / 20)
    hi = max(1.15, math.ceil(max(ratios) * 20) / 20)
    step = (w - left - right) / max(len(points), 1)

    def y(v: float) -> float:
        return top + (hi - v) / (hi - lo) * (h - top - bottom)

    def x(i: int) -> float:
        return left + step * (i + 0.5)

    body = []
    tick = lo
    while tick <= hi + 1e-9:
        body.append(line(left, y(tick), w - right, y(tick), "#eeeeee"))
        body.append(text(left - 6, y(tick) + 4, f"{tick:.2f}", anchor="end", size=11))
        tick = round(tick + 0.05, 2)
    body.append(line(left, y(1.0), w - right, y(1.0), "#9e9e9e", 1, "2,3"))
    for i, p in enumerate(points):
        t = float(p["target_ratio"])
        body.append(line(x(i) - step * 0.4, y(t), x(i) + step * 0.4, y(t), "#e57373", 1.5, "5,3"))
        body.append(text(x(i), h - bottom + 18, f"n={p['n']}", anchor="middle", size=11))
        body.append(text(x(i), h - bottom + 32, p.get("via", ""), anchor="middle", size=10,
                         fill="#757575"))  # fmt: skip
    path = " ".join(f"{x(i):.1f},{y(float(p['ratio'])):.1f}" for i, p in enumerate(points))
    body.append(f'<polyline points="{path}" fill="none" stroke="#1565c0" stroke-width="2"/>')
    for i, p in enumerate(points):
        r = float(p["ratio"])
        ok = r <= float(p["target_ratio"])
        tip = (
            f"n={p['n']}: lab {fmt_num(float(p['lab_median_ms']))} ms, pgbench "
            f"{fmt_num(float(p['pgbench_median_ms']))} ms, ratio {r:.3f} "
            f"({'within' if ok else 'ABOVE'} {float(p['target_ratio']):.2f})"
        )
        body.append(
            f'<circle cx="{x(i):.1f}" cy="{y(r):.1f}" r="4.5" '
            f'fill="{"#1565c0" if ok else "#c62828"}"><title>{esc(tip)}</title></circle>'
        )
        body.append(text(x(i), y(r) - 9, f"{r:.3f}", anchor="middle", size=11))
    return svg(w, h, "".join(body), "lab / pgbench at each n (dashed: the target)")


def bench_section(bench: Mapping[str, Any]) -> str:
    """The scale curve of a `bench --scale` record, with its table."""
    points = list(bench.get("points") or [])
    rows = "".join(
        f"<tr><td>{esc(p['n'])}</td><td>{esc(p.get('via', ''))}</td>"
        f"<td>{fmt_num(float(p['lab_median_ms']))}</td>"
        f"<td>{fmt_num(float(p['pgbench_median_ms']))}</td><td>{float(p['ratio']):.3f}</td>"
        f"<td>{float(p['target_ratio']):.2f}</td>"
        f"<td>{'within' if float(p['ratio']) <= float(p['target_ratio']) else 'ABOVE'}</td></tr>"
        for p in points
    )
    return (
        "<section id='bench-scale'><h2>bench --scale: fixed checkout, lab / pgbench</h2>"
        f"<p class='note'>medians of {esc(bench.get('rounds', '?'))} rounds per side; "
        f"reference: {esc(bench.get('pgbench', 'pgbench'))}</p>"
        + scale_chart(points)
        + "<table><tr><th>n</th><th>via</th><th>lab ms</th><th>pgbench ms</th>"
        "<th>ratio</th><th>target</th><th></th></tr>" + rows + "</table></section>"
    )


def pinned_section(pictures: Sequence[Picture]) -> str:
    """The pinned runs of the folder's trace and explore records, a picture each."""
    if not pictures:
        return ""
    # each says what it is (its caption), at its own size: shrunk to the column, a long
    # run's labels would be too small to read, so the picture scrolls instead
    drawn = "".join(f"<div class='pinned'>{draw([p])}</div>" for p in pictures)
    return "<section class='scenario' id='pinned'><h2>Pinned runs</h2>" + drawn + "</section>"


def render(
    records: Sequence[Record],
    run_id: str,
    verdicts: Sequence[ScenarioVerdicts] | None = None,
    bench: Mapping[str, Any] | None = None,
    pinned: Sequence[Picture] = (),
) -> str:
    """The whole page as one string (pure: records in, HTML out)."""
    by: dict[str, list[Record]] = {}
    for r in sorted(records, key=_variant_order):
        by.setdefault(str(r["scenario"]), []).append(r)
    vmap = {v.scenario: v for v in merge_cases(verdicts or [])}
    first = records[0] if records else {}
    lab = first.get("lab") or {}
    started = min((str(r.get("started_at", "")) for r in records), default="")
    all_claims = []
    for sc_id, recs in by.items():
        cl, _ = _scenario_claims(recs, vmap.get(sc_id))
        all_claims += cl
    held = sum(1 for c in all_claims if status_of(c) == "held")
    not_held = sum(1 for c in all_claims if status_of(c) == "not held")
    other = len(all_claims) - held - not_held
    profile = (first.get("verify") or {}).get("profile")
    nav = " ".join(f'<a href="#{esc(s)}">{esc(s)}</a>' for s in by)
    overview = []
    for sc_id, recs in by.items():
        cl, _ = _scenario_claims(recs, vmap.get(sc_id))
        statuses = [status_of(c) for c in cl]
        h, bad = statuses.count("held"), statuses.count("not held")
        badge = (
            f"<span class='badge {'not' if bad else 'held'}'>{h}/{h + bad} held</span>"
            if h + bad
            else "<span class='badge na'>no claims judged</span>"
        )
        if len(cl) > h + bad:
            badge += f" <span class='note'>+{len(cl) - h - bad} not judged or not exercised</span>"
        outs = "<br>".join(
            f"<b>{esc(r['variant'])}</b> <span class='mono'>{esc(measured_text(r))}</span>"
            for r in recs
        )
        overview.append(
            f"<tr><td><a href='#{esc(sc_id)}'>{esc(sc_id)}</a></td><td>{outs}</td><td>{badge}</td></tr>"
        )
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    summary_cls = "held" if not_held == 0 else "not"
    head = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>locklab run {esc(run_id)}</title><style>{STYLE}</style>"
        f"<script>{CHECK_SCRIPT}</script></head><body><main>"
    )
    header = (
        f"<h1>locklab run {esc(run_id)}</h1>"
        f"<div class='meta'>started {esc(started)} · servers: {esc(servers_text(first))} · "
        f"lab {esc(lab.get('version', '?'))} (commit {esc(lab.get('git_commit') or '?')}), "
        f"Python {esc(lab.get('python', '?'))}"
        + (f" · verify profile <b>{esc(profile)}</b>" if profile else "")
        + "</div>"
        f"<p class='summary'><span class='badge {summary_cls}'>{held} claims held, {not_held} not held</span>"
        + (f" <span class='note'>({other} not judged or not exercised)</span>" if other else "")
        + "</p>"
        f"<nav>{nav}</nav>"
        "<table><tr><th>scenario</th><th>measured</th><th>claims</th></tr>"
        + "".join(overview)
        + "</table>"
    )
    if not records and bench is not None:  # a bench run: no scenario, no claims to count
        header = (
            f"<h1>locklab run {esc(run_id)}</h1><div class='meta'>a <span class='mono'>"
            f"locklab bench --scale</span> record, lab commit {esc(bench.get('git_commit') or '?')}"
            "</div>"
        )
    if not records and bench is None and pinned:  # a trace or an explore: no claims to count
        header = f"<h1>locklab run {esc(run_id)}</h1><div class='meta'>pinned runs</div>"
    body = "".join(scenario_section(sc, recs, vmap.get(sc)) for sc, recs in by.items())
    if bench is not None:
        body += bench_section(bench)
    body += pinned_section(pinned)
    footer = (
        f"<p class='note'>Generated {generated} by <span class='mono'>locklab report</span>. "
        "Published numbers: Node 24 + node-postgres on PostgreSQL 17.11 "
        "(deadlock_timeout=1s) and Redis 7.4.11, as printed in the source documents.</p>"
    )
    return head + header + body + footer + "</main></body></html>\n"


def write_report(ref: str, out: Path | None = None) -> Path:
    """Render a recorded run (its id or folder) to `out`, default `<run folder>/report.html`."""
    from lab.pinned import drawn_runs

    folder = run_folder(ref)
    scale = folder / "bench" / "scale.json"
    bench = read_record(scale) if scale.is_file() else None
    pinned = drawn_runs(folder)
    top = any(folder.glob("*.json"))
    records = load_run(str(folder)) if top or (bench is None and not pinned) else []
    page = render(records, folder.name, load_verdicts(folder), bench, pinned)
    return write_text(out or folder / "report.html", page)
