"""A record's timeline as an SVG: its spans on one axis, its marks below."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
        body.append(
            rect(
                scale(a),
                top - 4,
                scale(b) - scale(a),
                h - top + 4,
                "#ffcdd2",
                f"two holders at once: {a:g}–{b:g} {unit}",
                'fill-opacity="0.7"',
            )
        )
        body.append(
            text(
                (scale(a) + scale(b)) / 2,
                top - 8,
                "both hold",
                anchor="middle",
                size=11,
                fill="#c62828",
                weight="600",
            )
        )
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
            style = (
                ""
                if k == "redis"
                else (f'fill-opacity="0.25" stroke="{colour}" stroke-dasharray="4 2"')
            )
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
        body.append(
            line(
                x,
                top + g * group_h + 2,
                x,
                top + (g + 1) * group_h - 2,
                WHO_COLOURS[g % len(WHO_COLOURS)],
                1.5,
            )
        )
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
