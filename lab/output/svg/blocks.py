"""SVG building blocks: colours, Scale, axis, rect/line/text, every value escaped."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

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


def text(
    x: float,
    y: float,
    s: object,
    *,
    anchor: str = "start",
    size: int = 12,
    fill: str = "#424242",
    weight: str = "normal",
) -> str:
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


def line(
    x1: float,
    y1: float,
    x2: float,
    y2: float,
    stroke: str = "#bdbdbd",
    width: float = 1,
    dash: str = "",
) -> str:
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
