"""bench --scale's curve: lab / pgbench at each n against its target."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lab.output.svg.blocks import esc, fmt_num, line, svg, text


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
        body.append(
            text(x(i), h - bottom + 32, p.get("via", ""), anchor="middle", size=10, fill="#757575")
        )
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
