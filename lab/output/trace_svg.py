"""A pinned run as one SVG: a lane per session, each step at the time it was measured.

The input is a small typed model (`Picture`), made from a run's JSON by `picture_of`;
`document` returns one self-contained SVG of one or more runs (no script, no external
font or URL), `draw` the same without the XML declaration, for an HTML page.

Time runs left to right in ms from the schedule's start, as the runner measured it
(lab/pinned/sequencer.py, ``StepClock``). A step is a box at its grant with its name, its SQL
shortened and its result; a step the server showed blocked carries a bar until its
``<... completed>``; an error is red with its SQLSTATE, and the session the deadlock
detector failed (40P01) is marked the victim; each session's end is at the right, the
invariants under the lanes. A 1 ms step and a 1 s wait share one picture: where two
events' labels need more room than their ms give them the gap is widened, so the axis
gives the measured ms at each event instead of one uniform scale.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEADLOCK = "40P01"
ERROR = re.compile(r"ERROR ([0-9A-Z]{5})\b")
SQL_CHARS = 36  # a step's SQL is shortened to this
RESULT_CHARS = 34
SANS_PX, BOLD_PX, MONO_PX = 6.8, 7.8, 6.1  # a character's width: 11 px sans, bold; 10 px mono
LEFT, RIGHT = 112.0, 120.0  # lane names; each session's end
LANE_H = 70.0
HEAD_H = 44.0
AXIS_H = 44.0
INV_H = 18.0
TIME_W = 720.0  # what the measured ms get of the width, besides the labels' room
GRANT_GAP = 26.0  # px between two grants at least: the order reads even at 0.1 ms apart
EVENT_GAP = 4.0
LABEL_GAP = 12.0
SANS = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
MONO = "ui-monospace, Menlo, Consolas, monospace"
INK, DIM, GUIDE = "#212121", "#757575", "#eeeeee"
RED, GREEN, AMBER, STEP = "#c62828", "#2e7d32", "#f9a825", "#1565c0"


@dataclass(frozen=True)
class Step:
    """One granted step: its box starts at `start_ms`, its wait at `wait_ms`."""

    session: str
    name: str
    shown: str  # the SQL or command
    start_ms: float
    end_ms: float | None  # None: the run ended before the step did
    wait_ms: float | None = None  # when the server showed it blocked; None: never
    result: str = ""  # "UPDATE 1", "ERROR 40P01 deadlock detected"

    @property
    def sqlstate(self) -> str:
        m = ERROR.match(self.result)
        return m[1] if m else ""


@dataclass(frozen=True)
class Span:
    """A state a session was in, not a step: frozen by SIGSTOP until SIGCONT."""

    session: str
    what: str
    start_ms: float
    end_ms: float | None  # None: still so when the run ended


@dataclass(frozen=True)
class Invariant:
    text: str
    held: bool


@dataclass(frozen=True)
class Picture:
    """What one run draws: its lanes (sessions, in order), steps, ends and invariants."""

    title: str
    lanes: tuple[str, ...]
    steps: tuple[Step, ...]
    end_ms: float
    outcomes: Mapping[str, str] = field(default_factory=dict)  # session -> its end word
    ends: Mapping[str, float] = field(default_factory=dict)  # session -> when it ended
    invariants: tuple[Invariant, ...] = ()
    caption: str = ""
    spans: tuple[Span, ...] = ()

    @property
    def victims(self) -> tuple[str, ...]:
        """Sessions a step of which the deadlock detector failed."""
        failed = {s.session for s in self.steps if s.sqlstate == DEADLOCK}
        return tuple(lane for lane in self.lanes if lane in failed)


def picture_of(run: Mapping[str, Any], caption: str = "") -> Picture | None:
    """The picture of a run's JSON (lab/pinned/schedules.py PinnedResult.to_json); None without
    measured times (a record older than them)."""
    timing = run.get("timing") or {}
    raw = timing.get("steps") or []
    if not raw:
        return None
    steps = tuple(
        Step(
            session=str(t["session"]),
            name=str(t["step"]),
            shown=str(t.get("shown") or ""),
            start_ms=float(t["granted_ms"]),
            end_ms=_ms(t.get("ended_ms")),
            wait_ms=_ms(t.get("waiting_ms")),
            result=str(t.get("result") or ""),
        )
        for t in raw
    )
    outcomes = {str(k): str(v) for k, v in (run.get("outcomes") or {}).items()}
    lanes = tuple(dict.fromkeys([*outcomes, *(s.session for s in steps)]))
    transcript = str(run.get("transcript") or "")
    title = transcript.splitlines()[0] if transcript else f"schedule {run.get('name') or ''}"
    invariants = tuple(
        Invariant(f"{c.get('name')}: {c.get('detail')}", bool(c.get("held")))
        for c in run.get("invariants") or []
    )
    ends = {str(k): float(v) for k, v in (timing.get("ends") or {}).items()}
    spans = tuple(
        Span(str(sp["session"]), str(sp["what"]), float(sp["start_ms"]), _ms(sp.get("end_ms")))
        for sp in timing.get("spans") or []
    )
    times = [t for s in steps for t in (s.start_ms, s.wait_ms, s.end_ms) if t is not None]
    times += [t for sp in spans for t in (sp.start_ms, sp.end_ms) if t is not None]
    end = max([float(timing.get("end_ms") or 0.0), *ends.values(), *times])
    title = " ".join(title.split())
    return Picture(title, lanes, steps, end, outcomes, ends, invariants, caption, spans)


def _ms(v: object) -> float | None:
    return None if v is None else float(str(v))


# --- text ------------------------------------------------------------------------------


def shorten(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: whole words from its start and its end."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    words = text.split(" ")
    head: list[str] = []
    tail: list[str] = []
    half = (limit - 3) // 2
    while words and len(" ".join([*head, words[0]])) <= half:
        head.append(words.pop(0))
    while words and len(" ".join([words[-1], *tail])) <= limit - 3 - len(" ".join(head)):
        tail.insert(0, words.pop())
    keyword = [i for i, w in enumerate(tail) if w.isalpha() and w.isupper()]
    tail = tail[keyword[0] :] if keyword else tail  # "… WHERE sku = 'A-1'", not "… 1 WHERE"
    if not head:  # one long word
        return text[: limit - 1] + "…"
    return " ".join(head) + " … " + " ".join(tail) if tail else " ".join(head) + " …"


def ms_text(v: float) -> str:
    return f"{v:.0f}" if v >= 10_000 else f"{v:.1f}"


def _esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def _text(
    x: float,
    y: float,
    s: str,
    *,
    size: int = 11,
    fill: str = INK,
    anchor: str = "start",
    bold: bool = False,
    mono: bool = False,
    cls: str = "label",
) -> str:
    weight = ' font-weight="bold"' if bold else ""
    family = f' style="font-family: {MONO}"' if mono else ""  # a page's CSS does not win
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" '
        f'text-anchor="{anchor}"{weight}{family} class="{cls}">{_esc(s)}</text>'
    )


def _rect(
    x: float, y: float, w: float, h: float, fill: str, tip: str, cls: str = "", stroke: str = ""
) -> str:
    line = f' stroke="{stroke}"' if stroke else ""
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{h:.1f}" rx="2" '
        f'fill="{fill}"{line} class="{cls}"><title>{_esc(tip)}</title></rect>'
    )


def _line(
    x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1, dash: str = ""
) -> str:
    d = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}" '
        f'stroke-width="{width}"{d}/>'
    )


# --- layout: where each measured ms goes -------------------------------------------------


@dataclass(frozen=True)
class _Label:
    """The rows a step (or a completion) writes in its lane, from its x on."""

    t: float
    lane: str
    rows: tuple[str, str, str]  # above the box, the SQL (mono), under the box

    @property
    def width(self) -> float:
        top, sql, under = self.rows
        return max(len(top) * BOLD_PX, len(sql) * MONO_PX, len(under) * BOLD_PX)


def _labels(p: Picture) -> list[_Label]:
    out = []
    for s in p.steps:
        under = "<waiting ...>" if s.wait_ms is not None else _result(s)
        top = f"{s.name}  {ms_text(s.start_ms)} ms"
        out.append(_Label(s.start_ms, s.session, (top, shorten(s.shown, SQL_CHARS), under)))
        if s.wait_ms is not None and s.end_ms is not None:
            done = f"<... completed> {ms_text(s.end_ms)} ms"
            out.append(_Label(s.end_ms, s.session, (done, "", _result(s))))
    return out


def _result(s: Step) -> str:
    if s.end_ms is None:
        return "(not ended)"
    text = shorten(s.result, RESULT_CHARS)
    return text if s.sqlstate else f"-> {text}"


def _knots(p: Picture) -> list[float]:
    times = {0.0, p.end_ms, *p.ends.values()}
    for s in p.steps:
        times |= {t for t in (s.start_ms, s.wait_ms, s.end_ms) if t is not None}
    for sp in p.spans:
        times |= {t for t in (sp.start_ms, sp.end_ms) if t is not None}
    return sorted(times)


def _place(p: Picture, per_ms: float) -> tuple[dict[float, float], float]:
    """x (from the lanes' left edge) of every event time, and the width the labels take:
    the measured gap at `per_ms` px a ms, widened where a grant must stand apart from the
    one before it or a label must clear the one before it in its lane."""
    labels = _labels(p)
    grants = {s.start_ms for s in p.steps}
    free = dict.fromkeys(p.lanes, 0.0)  # where each lane's last label ends
    at: dict[float, float] = {}
    x, prev = 0.0, 0.0
    for t in _knots(p):
        if t > prev:
            x += max((t - prev) * per_ms, GRANT_GAP if t in grants else EVENT_GAP)
        here = [lb for lb in labels if lb.t == t]
        x = max([x, *(free.get(lb.lane, 0.0) for lb in here)])
        for lb in here:
            free[lb.lane] = x + lb.width + LABEL_GAP
        at[t], prev = x, t
    return at, max([x, *free.values()])


def _scale(p: Picture) -> tuple[dict[float, float], float]:
    """The layout whose measured gaps share TIME_W with the labels' room (at least 160 px
    for the whole run, however much room the labels took)."""
    _, crowded = _place(p, 0.0)
    per_ms = max(TIME_W - crowded, 160.0) / max(p.end_ms, 0.001)
    return _place(p, per_ms)


# --- drawing ---------------------------------------------------------------------------


def panel(p: Picture) -> tuple[str, float, float]:
    """One run's drawing (SVG elements), its width and height."""
    at, span = _scale(p)

    def x(t: float | None) -> float:
        return LEFT + at[p.end_ms if t is None else t]

    lanes_top = HEAD_H
    axis_y = lanes_top + len(p.lanes) * LANE_H + 6
    texts = [len(p.title) * 9.2, len(p.caption) * SANS_PX]
    texts += [64 + len(f"invariant  {shorten(i.text, 110)}") * SANS_PX for i in p.invariants]
    words = [len(f"ends {w}") * BOLD_PX for w in p.outcomes.values()]
    width = max([LEFT + span + max([RIGHT, *(28 + w for w in words)]), *(24 + w for w in texts)])
    height = axis_y + AXIS_H + len(p.invariants) * INV_H + 10
    row = {lane: lanes_top + i * LANE_H for i, lane in enumerate(p.lanes)}
    victims = set(p.victims)
    out = [_text(12, 18, p.title, size=13, bold=True, cls="title")]
    if p.caption:
        out.append(_text(12, 34, p.caption, fill=DIM, cls="caption"))
    for t in sorted({s.start_ms for s in p.steps}):  # a guide at every grant, behind
        out.append(_line(x(t), lanes_top, x(t), axis_y, GUIDE))
    for lane, y in row.items():
        end = p.ends.get(lane, p.end_ms)
        word = p.outcomes.get(lane, "")
        colour = RED if word[:1].isdigit() else GREEN if word == "ok" else INK
        out.append(f'<g class="lane" data-session="{_esc(lane)}">')
        out.append(_line(x(0.0), y + 38, x(end), y + 38, "#bdbdbd", 2))
        out.append(f'<circle cx="{x(end):.1f}" cy="{y + 38:.1f}" r="3" fill="{colour}"/>')
        out.append(_text(12, y + 42, lane, size=13, bold=True, cls="lane-name"))
        if lane in victims:
            tag = _text(12, y + 57, "deadlock victim", size=10, fill=RED, bold=True, cls="victim")
            out.append(tag)
        if word:
            ends = f"ends {word}"
            out.append(_text(LEFT + span + 16, y + 42, ends, fill=colour, bold=True, cls="outcome"))
        out.append("</g>")
    for sp in p.spans:
        out += _span(sp, row[sp.session], x, p.steps)
    for s in p.steps:
        out += _step(s, row[s.session], x)
    out += _axis(p, at, axis_y)
    for i, inv in enumerate(p.invariants):
        y = axis_y + AXIS_H + i * INV_H
        word, colour = ("held", GREEN) if inv.held else ("BROKEN", RED)
        out.append(_rect(12, y - 11, 56, 15, colour, inv.text, "invariant"))
        out.append(_text(40, y, word, size=10, fill="#ffffff", anchor="middle", bold=True))
        out.append(_text(76, y, f"invariant  {shorten(inv.text, 110)}", cls="invariant-text"))
    return "".join(out), width, height


def _step(s: Step, y: float, x: Callable[[float | None], float]) -> list[str]:
    """A step's box at its grant, its labels, and its wait bar until it completed."""
    x0 = x(s.start_ms)
    waited = s.wait_ms is not None
    # a waited step's statement went to the server at its grant and blocked there; when
    # the sequencer saw it blocked is in the bar's tooltip, not where the bar starts
    x1 = x0 + 8 if waited else max(x(s.end_ms), x0 + 8)
    error = bool(s.sqlstate)
    when = f"granted {ms_text(s.start_ms)} ms"
    when += "" if s.end_ms is None else f", ended {ms_text(s.end_ms)} ms"
    tip = f"{s.session} {s.name}: {s.shown} -> {s.result or '?'} ({when})"
    fill = RED if error and not waited else STEP
    result_fill = RED if error else INK
    out = [f'<g class="step" data-step="{_esc(f"{s.session} {s.name}")}">']
    out.append(_rect(x0, y + 31, x1 - x0, 14, fill, tip, "box"))
    out.append(_text(x0, y + 13, s.name, bold=True, cls="step-name"))
    at_ms = x0 + len(s.name) * BOLD_PX + 8
    out.append(_text(at_ms, y + 13, f"{ms_text(s.start_ms)} ms", size=10, fill=DIM, cls="ms"))
    if s.shown:
        sql = shorten(s.shown, SQL_CHARS)
        out.append(_text(x0, y + 25, sql, size=10, fill=DIM, mono=True, cls="sql"))
    if waited:
        out.append(_text(x0, y + 60, "<waiting ...>", fill="#8d6e00", cls="result"))
        xe = x(s.end_ms)
        what = f"{s.session} {s.name} waited"
        wait_tip = f"{what} until the run ended"
        if s.end_ms is not None:
            wait_tip = f"{what} {ms_text(s.end_ms - s.start_ms)} ms"
        wait_tip += f" (seen blocked at {ms_text(s.wait_ms or s.start_ms)} ms)"
        out.append(_rect(x1, y + 32, xe - x1, 12, AMBER, wait_tip, "wait"))
        if s.end_ms is not None:
            took = f"waited {ms_text(s.end_ms - s.start_ms)} ms"
            if len(took) * 5.6 + 8 < xe - x1:  # 9 px text, where the bar has room for it
                mid = (x1 + xe) / 2
                out.append(_text(mid, y + 41, took, size=9, fill="#4e342e", anchor="middle"))
            out.append(_line(xe, y + 27, xe, y + 49, result_fill, 2))
            done = f"<... completed> {ms_text(s.end_ms)} ms"
            out.append(_text(xe, y + 13, done, size=10, fill=DIM, cls="completed"))
            out.append(_text(xe, y + 60, _result(s), fill=result_fill, bold=error, cls="result"))
    else:
        out.append(_text(x0, y + 60, _result(s), fill=result_fill, bold=error, cls="result"))
    out.append("</g>")
    return out


def _span(
    sp: Span, y: float, x: Callable[[float | None], float], steps: Sequence[Step]
) -> list[str]:
    """A state along the lane, behind its steps: a tinted band, its length written in
    unless a wait of the same session's is drawn there."""
    x0, x1 = x(sp.start_ms), x(sp.end_ms)
    end = float("inf") if sp.end_ms is None else sp.end_ms
    long = "until the run ended" if sp.end_ms is None else f"{ms_text(end - sp.start_ms)} ms"
    out = [_rect(x0, y + 28, x1 - x0, 20, "#ede7f6", f"{sp.session} {sp.what} {long}", "span")]
    said = f"{sp.what} {long}"
    mine = [s for s in steps if s.session == sp.session and s.wait_ms is not None]
    waits = [s for s in mine if s.start_ms < end and (s.end_ms or end) > sp.start_ms]
    if not waits and len(said) * 5.6 + 8 < x1 - x0:
        out.append(_text((x0 + x1) / 2, y + 41, said, size=9, fill="#4527a0", anchor="middle"))
    return out


def _axis(p: Picture, at: Mapping[float, float], y: float) -> list[str]:
    """The time axis: a tick at every event, labelled where the label has room."""
    out = [_line(LEFT + at[0.0], y, LEFT + at[p.end_ms], y, DIM)]
    right = -1e9
    for t in sorted(at):
        xt = LEFT + at[t]
        out.append(_line(xt, y, xt, y + 5, DIM))
        label = ms_text(t)
        if xt - len(label) * SANS_PX / 2 > right + 6:
            out.append(_text(xt, y + 17, label, size=10, fill=DIM, anchor="middle", cls="tick"))
            right = xt + len(label) * SANS_PX / 2
    note = "ms from the schedule's start, as measured (gaps widened where labels need room)"
    out.append(_text(LEFT, y + 33, note, size=10, fill=DIM, cls="axis-note"))
    return out


def draw(pictures: Sequence[Picture], label: str = "") -> str:
    """One <svg> of every picture, stacked (for a file or an HTML page)."""
    panels = [panel(p) for p in pictures]
    width = max([w for _, w, _ in panels], default=200.0)
    height = sum(h for _, _, h in panels) or 40.0
    body, y = [], 0.0
    for drawn, _, h in panels:
        body.append(f'<g transform="translate(0,{y:.1f})">{drawn}</g>')
        y += h
    title = label or "; ".join(p.title for p in pictures) or "no pinned run"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{_esc(title)}" '
        f'font-family="{SANS}" class="locklab-trace">'
        f"<title>{_esc(title)}</title>"
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>'
        + "".join(body)
        + "</svg>"
    )


def document(pictures: Sequence[Picture]) -> str:
    """A standalone .svg file of the pictures."""
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + draw(pictures) + "\n"
