"""The report's charts: outcomes, bars, latencies, the evidence matrix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from lab.output.svg.blocks import (
    ROW_H,
    WIDTH,
    Scale,
    axis,
    esc,
    fmt_num,
    label_width,
    line,
    outcome_colour,
    rect,
    svg,
    text,
    variant_colour,
)

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
                body.append(
                    text(
                        x + w / 2,
                        y + 15,
                        f"{k} {c}" if w > 70 else str(c),
                        anchor="middle",
                        size=11,
                        fill="#ffffff",
                        weight="600",
                    )
                )
            x += w
        body.append(text(x1 + 6, y + 15, f"n={total}", size=11, fill="#757575"))
        y += ROW_H + (6 if published else 2)
    lx = x0
    for k in keys:
        body.append(rect(lx, y + 6, 10, 10, outcome_colour(k, keys)))
        body.append(text(lx + 14, y + 15, k, size=11))
        lx += 24 + len(k) * 7
    if any(published for _, _, published in rows):
        body.append(
            text(
                x1,
                y + 15,
                "faded bars: the document's published counts",
                anchor="end",
                size=11,
                fill="#9e9e9e",
            )
        )
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
        body.append(
            text(scale(hi) + 5, y + 15, f"p50 {fmt_num(p.get('p50', 0))}", size=11, fill="#757575")
        )
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
            body.append(
                rect(
                    x,
                    y + 4,
                    max(w, 1),
                    rh - 8,
                    variant_colour(v, variants),
                    f"{row.name} — {v}: {value:g}",
                )
            )
            label = fmt_num(value)
            if v in row.published:
                px = x + bar_max * row.published[v] / top
                body.append(line(px, y + 1, px, y + rh - 1, "#616161", 2))
                label += f" ({fmt_num(row.published[v])})"
            body.append(text(x + max(w, 1) + 4, y + 14, label, size=11))
    return svg(WIDTH, head + len(rows) * rh + 6, "".join(body), "server-side evidence per variant")
