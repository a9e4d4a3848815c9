"""Text timelines: a record's spans as bars on one shared time axis, its marks listed below.

A record carries a timeline in ``evidence["timeline"]``::

    {"unit": "ms",
     "spans": [{"who": "A", "kind": "belief", "start_ms": 0.7, "end_ms": 504.3,
                "label": "fence=1"}],
     "marks": [{"who": "A", "t_ms": 504.3, "label": "release -> 1"}]}

Each who × kind gets one row (whoever starts first is drawn first; kinds in the order
they first appear), each kind its own fill character, so the picture reads the same
without colour (NO_COLOR, a pipe, a log file). Marks get a key (1-9, a-z) on their who's
"marks" row and one legend line each. Nothing here knows any scenario.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

FILLS = "=#~-:"  # one per kind, in order of first appearance
STYLES = ("cyan", "magenta", "yellow", "green", "blue")
KEYS = "123456789abcdefghijklmnopqrstuvwxyz"
MIN_AXIS = 20


def timeline_of(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The record's timeline, or None when it has none (or an empty one)."""
    tl = (record.get("evidence") or {}).get("timeline")
    if not isinstance(tl, Mapping) or not (tl.get("spans") or tl.get("marks")):
        return None
    return tl


def render(console: Console, record: Mapping[str, Any]) -> None:
    """Draw the record's timeline; print nothing when the record has none."""
    tl = timeline_of(record)
    if tl is None:
        return
    unit = str(tl.get("unit", "ms"))
    spans: Sequence[Mapping[str, Any]] = tl.get("spans") or []
    marks: Sequence[Mapping[str, Any]] = sorted(tl.get("marks") or [], key=lambda m: m["t_ms"])
    kinds = _ordered(s["kind"] for s in spans)
    firsts = [(s["start_ms"], s["who"]) for s in spans] + [(m["t_ms"], m["who"]) for m in marks]
    whos = _ordered(who for _, who in sorted(firsts, key=lambda x: x[0]))  # who came first
    rows = [
        (w, k) for w in whos for k in kinds if any(s["who"] == w and s["kind"] == k for s in spans)
    ]
    rows += [(w, "marks") for w in whos if any(m["who"] == w for m in marks)]
    rows.sort(key=lambda r: whos.index(r[0]))  # a who's rows together, marks last

    times = [t for s in spans for t in (s["start_ms"], s["end_ms"])] + [m["t_ms"] for m in marks]
    lo, hi = min(0.0, *map(float, times)), max(map(float, times))
    hi = hi if hi > lo else lo + 1
    label_w = max(len(f"{w} {k}") for w, k in rows) + 2
    width = max(MIN_AXIS, console.width - label_w - 1)

    def col(t: float) -> int:
        return min(width - 1, max(0, round((t - lo) / (hi - lo) * (width - 1))))

    title = Text(f"timeline ({unit})  ", style="bold")
    for i, k in enumerate(kinds):
        title.append(FILLS[i % len(FILLS)] * 3, style=STYLES[i % len(STYLES)])
        title.append(f" {k}  ")
    if marks:
        title.append("1 2 3 … marks, listed below")
    _print(console, title)
    ticks, axis = _axis(lo, hi, width, col)
    _print(console, Text(" " * label_w + ticks, style="dim"))
    _print(console, Text(" " * label_w + axis, style="dim"))

    keys = {id(m): KEYS[i] if i < len(KEYS) else "*" for i, m in enumerate(marks)}
    for who, kind in rows:
        line = Text(f"{who} {kind}".ljust(label_w))
        cells: list[tuple[str, str]] = [(" ", "")] * width
        if kind == "marks":
            for m in marks:
                if m["who"] == who:
                    c = col(m["t_ms"])
                    cells[c] = ("+" if cells[c][0] != " " else keys[id(m)], "bold")
        else:
            i = kinds.index(kind)
            fill, style = FILLS[i % len(FILLS)], STYLES[i % len(STYLES)]
            for s in spans:
                if s["who"] == who and s["kind"] == kind:
                    a, b = col(s["start_ms"]), max(col(s["start_ms"]), col(s["end_ms"]))
                    text = f"[{s.get('label', '')!s}" if b - a >= 2 else ""
                    for c in range(a, b + 1):
                        ch = text[c - a] if c - a < len(text) and c < b else fill
                        cells[c] = ("]" if c == b and b > a else ch, style)
        for ch, style in cells:
            line.append(ch, style=style or None)
        _print(console, line)

    for m in marks:
        key = keys[id(m)]
        _print(
            console, Text(f"  {key}  {m['t_ms']:>8.1f} {unit}  {m['who']}  {m.get('label', '')}")
        )


def _ordered(items: Any) -> list[str]:
    out: list[str] = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def _axis(lo: float, hi: float, width: int, col: Callable[[float], int]) -> tuple[str, str]:
    """Tick labels and a ruler, at a 1-2-5 step that leaves room for each label."""
    span = hi - lo
    target = max(1, width // 10)
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    labels = [" "] * width
    ruler = ["-"] * width
    t = math.ceil(lo / step) * step
    while t <= hi + 1e-9:
        c = col(t)
        ruler[c] = "|"
        text = f"{t:g}"
        start = min(c, width - len(text))
        if all(ch == " " for ch in labels[max(0, start - 1) : start + len(text)]):
            labels[start : start + len(text)] = list(text)
        t += step
    return "".join(labels), "".join(ruler)


def _print(console: Console, text: Text) -> None:
    console.print(text, no_wrap=True, overflow="crop", highlight=False)
