"""A record's timeline as an SVG: its spans on one axis, its marks below."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.output.svg.blocks import (
    WHO_COLOURS,
    WIDTH,
    Scale,
    _nice_step,
    axis,
    label_width,
    line,
    rect,
    svg,
    text,
)


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


@dataclass(frozen=True)
class _Frame:
    """Where the chart's parts go: the lanes (each actor × each kind), the time axis, the unit."""

    who: list[str]
    kinds: list[str]
    labels: list[str]  # one per lane
    scale: Scale
    unit: str
    x0: float
    x1: float
    top: float = 40.0
    lane_h: float = 24.0

    @property
    def lanes(self) -> list[tuple[str, str]]:
        """Each (actor, kind) pair, one lane each, grouped by actor."""
        return [(w, k) for w in self.who for k in self.kinds]

    @property
    def group_h(self) -> float:
        """The height of one actor's lanes together."""
        return self.lane_h * len(self.kinds)

    @property
    def bottom(self) -> float:
        """The y where the last lane ends."""
        return self.top + len(self.lanes) * self.lane_h

    def colour(self, who: str) -> str:
        """The actor's colour."""
        return WHO_COLOURS[self.who.index(who) % len(WHO_COLOURS)]


def timeline_chart(tl: Mapping[str, Any], title: str) -> str:
    """Swimlanes: per actor, when it believed it held the lock and when Redis said it did.

    Red bands mark times when two different actors believed they held the lock at once;
    numbered dots are the events listed under the chart.
    """
    spans, marks, who = timeline_parts(tl)
    if not spans and not marks:
        return ""
    frame = _frame(tl, spans, marks, who)
    body = [axis(frame.scale, frame.top - 4, frame.bottom, frame.unit)]
    body += _overlap_bands(frame, spans)
    body += _lanes(frame, spans)
    body += _mark_ticks(frame, marks)
    for w, x, nums in _clusters(frame, marks):
        body += _pill(frame, marks, w, x, nums)
    legend_y = frame.bottom + 40
    body += _legend(frame.x0, legend_y)
    return svg(WIDTH, legend_y + 10, "".join(body), title)


def _frame(
    tl: Mapping[str, Any],
    spans: Sequence[Mapping[str, Any]],
    marks: Sequence[Mapping[str, Any]],
    who: list[str],
) -> _Frame:
    """The lanes (belief first, then redis, then any other kind) and an axis past the last time."""
    kinds = [k for k in ("belief", "redis") if any(s.get("kind") == k for s in spans)] or ["belief"]
    kinds += sorted({str(s.get("kind")) for s in spans} - set(kinds))
    names = {"redis": "Redis says", "belief": "believes"}
    labels = [f"{w} · {names.get(k, k)}" for w in who for k in kinds]
    x0, x1 = label_width(labels) + 10, WIDTH - 20
    t_end = max([float(s["end_ms"]) for s in spans] + [float(m["t_ms"]) for m in marks] + [1.0])
    step = _nice_step(t_end, 8)
    scale = Scale(0, math.ceil(t_end / step) * step, x0, x1)
    return _Frame(who, kinds, labels, scale, str(tl.get("unit", "ms")), x0, x1)


def _overlap_bands(frame: _Frame, spans: Sequence[Mapping[str, Any]]) -> list[str]:
    """A red band, headed "both hold", wherever two actors believed they held the lock."""
    parts = []
    for a, b in _overlaps([s for s in spans if s.get("kind") == "belief"]):
        xa, xb = frame.scale(a), frame.scale(b)
        tip = f"two holders at once: {a:g}–{b:g} {frame.unit}"
        height = frame.bottom - frame.top + 4
        parts.append(rect(xa, frame.top - 4, xb - xa, height, "#ffcdd2", tip, 'fill-opacity="0.7"'))
        parts.append(
            text(
                (xa + xb) / 2,
                frame.top - 8,
                "both hold",
                anchor="middle",
                size=11,
                fill="#c62828",
                weight="600",
            )
        )
    return parts


def _lanes(frame: _Frame, spans: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each lane: a rule above each actor's group, the lane's label, its spans as bars."""
    parts = []
    for i, ((w, k), label) in enumerate(zip(frame.lanes, frame.labels, strict=True)):
        y = frame.top + i * frame.lane_h
        if k == frame.kinds[0] and i:
            parts.append(line(8, y, frame.x1, y, "#e0e0e0"))
        parts.append(text(frame.x0 - 8, y + 16, label, anchor="end", size=11))
        for s in spans:
            if str(s.get("who")) == w and str(s.get("kind")) == k:
                parts += _bar(frame, s, y)
    return parts


def _bar(frame: _Frame, s: Mapping[str, Any], y: float) -> list[str]:
    """One span: solid if Redis's, dashed if a belief; its label inside when it fits."""
    w, k = str(s.get("who")), str(s.get("kind"))
    colour = frame.colour(w)
    start, end = float(s["start_ms"]), float(s["end_ms"])
    a, b = frame.scale(start), frame.scale(end)
    label = str(s.get("label", ""))
    tip = f"{w} {k}: {start:g}–{end:g} {frame.unit} {label}"
    style = "" if k == "redis" else f'fill-opacity="0.25" stroke="{colour}" stroke-dasharray="4 2"'
    parts = [rect(a, y + 5, b - a, frame.lane_h - 10, colour, tip.strip(), style)]
    if label and b - a > len(label) * 6.2 + 6:
        fill = "#ffffff" if k == "redis" else "#212121"
        parts.append(text((a + b) / 2, y + 16, label, anchor="middle", size=10, fill=fill))
    return parts


def _mark_ticks(frame: _Frame, marks: Sequence[Mapping[str, Any]]) -> list[str]:
    """A tick across its actor's lanes at each event's time."""
    parts = []
    for m in marks:
        w, x = str(m.get("who")), frame.scale(float(m["t_ms"]))
        g = frame.who.index(w)
        y0, y1 = frame.top + g * frame.group_h + 2, frame.top + (g + 1) * frame.group_h - 2
        parts.append(line(x, y0, x, y1, frame.colour(w), 1.5))
    return parts


def _clusters(
    frame: _Frame, marks: Sequence[Mapping[str, Any]]
) -> list[tuple[str, float, list[int]]]:
    """Events close in time, per actor, as (who, x, event numbers): one pill ("1–4") each."""
    clusters: list[tuple[str, float, list[int]]] = []
    for n, m in enumerate(marks, start=1):
        w, x = str(m.get("who")), frame.scale(float(m["t_ms"]))
        same = [c for c in clusters if c[0] == w]
        if same and x - same[-1][1] < 16:
            same[-1][2].append(n)
        else:
            clusters.append((w, x, [n]))
    return clusters


def _pill(
    frame: _Frame, marks: Sequence[Mapping[str, Any]], w: str, x: float, nums: list[int]
) -> list[str]:
    """A cluster's numbered pill atop its actor's lanes; its tooltip lists the events."""
    label = str(nums[0]) if len(nums) == 1 else f"{nums[0]}–{nums[-1]}"
    pw = max(13.0, 6 + len(label) * 5.6)
    cy = frame.top + frame.who.index(w) * frame.group_h + 7
    tip = "; ".join(
        f"{n}. {w} at {float(marks[n - 1]['t_ms']):g} {frame.unit}: {marks[n - 1].get('label', '')}"
        for n in nums
    )
    return [
        rect(x - pw / 2, cy - 6.5, pw, 13, frame.colour(w), tip, 'rx="6.5" stroke="#ffffff"'),
        text(x, cy + 3.5, label, anchor="middle", size=9, fill="#ffffff", weight="700"),
    ]


def _legend(x0: float, y: float) -> list[str]:
    """What the dashed bars, the solid bars and the red bands mean."""
    dashed = 'fill-opacity="0.25" stroke="#607d8b" stroke-dasharray="4 2"'
    return [
        rect(x0, y - 9, 18, 10, "#90a4ae", "", dashed),
        text(x0 + 24, y, "believes it holds the lock", size=11),
        rect(x0 + 200, y - 9, 18, 10, "#607d8b"),
        text(x0 + 224, y, "Redis has its token", size=11),
        rect(x0 + 360, y - 9, 18, 10, "#ffcdd2"),
        text(x0 + 384, y, "two actors believe they hold it", size=11),
    ]


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
