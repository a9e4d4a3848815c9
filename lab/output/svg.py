"""The report's drawing module: SVG building blocks (Scale, axis, rect/line/text) and
the charts of `locklab report` (outcome, bar, latency, matrix, timeline and scale charts).

Every function returns one self-contained `<svg>` string (or "" when there is nothing to
draw), each value escaped here: this is the one module of lab/output that writes markup
in Python; the page around the charts is a template (lab/output/html.py).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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


# --- building blocks -----------------------------------------------------------------


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


def who_colour(who: str, everyone: Sequence[str]) -> str:
    """An actor's colour on a timeline (its lanes, its dots, its rows in the events table)."""
    return WHO_COLOURS[everyone.index(who) % len(WHO_COLOURS)]


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


class MatrixRow(Protocol):
    """One measured quantity across variants, with the document's value where it has one
    (lab.output.report_view.EvidenceRow)."""

    @property
    def name(self) -> str: ...
    @property
    def values(self) -> Mapping[str, float]: ...  # variant -> value
    @property
    def published(self) -> Mapping[str, float]: ...  # variant -> the document's value


def matrix_chart(rows: Sequence[MatrixRow], variants: Sequence[str]) -> str:
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


def timeline_parts(
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
    spans, marks, who = timeline_parts(tl)
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
