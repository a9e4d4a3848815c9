"""lab.timeline: spans drawn on one shared axis, readable without colour (no server needed)."""

from __future__ import annotations

import io
import itertools
from typing import Any

import pytest
from rich.console import Console

from lab.core.records import Record
from lab.output.timeline import render, timeline_of

WIDTH = 80
LABEL_W = len("A belief") + 2  # the longest row label, plus padding


def record(spans: list[dict[str, Any]], marks: list[dict[str, Any]] | None = None) -> Record:
    return {"evidence": {"timeline": {"unit": "ms", "spans": spans, "marks": marks or []}}}


def span(who: str, kind: str, start: float, end: float, label: str = "") -> dict[str, Any]:
    return {"who": who, "kind": kind, "start_ms": start, "end_ms": end, "label": label}


def draw(rec: Record, width: int = WIDTH) -> list[str]:
    buf = io.StringIO()
    render(Console(file=buf, width=width, color_system=None), rec)
    return buf.getvalue().splitlines()


def row(lines: list[str], name: str) -> str:
    return next(line for line in lines if line.startswith(name + " "))[LABEL_W:]


def test_spans_share_one_axis() -> None:
    """A span over the first half of the run fills the first half of its row, in every row."""
    lines = draw(record([span("A", "belief", 0, 500), span("B", "belief", 500, 1000)]))
    a, b = row(lines, "A belief"), row(lines, "B belief")
    assert len(a.rstrip()) == pytest.approx(len(a) / 2, abs=2)
    assert b.index("[") == pytest.approx(len(b) / 2, abs=2)
    assert a.rstrip().endswith("]") and b.rstrip().endswith("]")


def test_one_row_per_who_and_kind_with_distinct_fills() -> None:
    """Each who × kind is its own row; kinds differ by fill character, so no colour is needed."""
    lines = draw(record([span("A", "belief", 0, 800), span("A", "redis", 0, 300)]))
    assert [line.split()[:2] for line in lines if line.startswith("A ")] == [
        ["A", "belief"],
        ["A", "redis"],
    ]
    assert "=" in row(lines, "A belief") and "=" not in row(lines, "A redis")
    assert "#" in row(lines, "A redis")
    assert "=== belief" in lines[0] and "### redis" in lines[0]


def test_labels_sit_inside_their_bar() -> None:
    """A span's label is written at its start, inside the brackets, when it fits."""
    lines = draw(record([span("A", "belief", 0, 1000, "fence=1")]))
    assert row(lines, "A belief").startswith("[fence=1==")


def test_rows_follow_who_came_first() -> None:
    """Whoever starts first is drawn first, whatever the order of the spans in the record."""
    lines = draw(record([span("C", "belief", 600, 700), span("A", "belief", 0, 100)]))
    names = [line.split()[0] for line in lines if line[:2] in ("A ", "C ")]
    assert names == ["A", "C"]


def test_marks_get_keys_and_a_legend() -> None:
    """Marks are keyed on their who's row and listed with their time and label."""
    rec = record(
        [span("A", "belief", 0, 1000)],
        [
            {"who": "A", "t_ms": 1000, "label": "DEL -> 1"},
            {"who": "A", "t_ms": 0, "label": "SET NX"},
        ],
    )
    lines = draw(rec)
    marks = row(lines, "A marks")
    assert marks[0] == "1" and marks.rstrip()[-1] == "2"  # keyed in time order
    assert any(line.split() == ["1", "0.0", "ms", "A", "SET", "NX"] for line in lines)
    assert any("1000.0 ms  A  DEL -> 1" in line for line in lines)


def test_axis_ticks_are_round_numbers() -> None:
    """The ruler's tick labels are 1-2-5 steps from zero up to the last event."""
    lines = draw(record([span("A", "belief", 0, 750)]))
    ticks = lines[1].split()
    assert ticks[0] == "0"
    steps = {int(b) - int(a) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1 and steps.pop() in (50, 100, 200)


def test_no_timeline_prints_nothing() -> None:
    """A record without a timeline (or with an empty one) renders as nothing at all."""
    assert draw({"evidence": {}}) == []
    assert draw(record([])) == []
    assert timeline_of({}) is None


def test_lines_fit_the_console_width() -> None:
    """No line is wider than the console, even when a label is longer than its bar."""
    rec = record([span("worker-with-a-long-name", "belief", 0, 3, "a very long label")])
    for width in (40, 120):
        assert all(len(line) <= width for line in draw(rec, width))


def test_no_color_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """With NO_COLOR and a non-tty file the output is plain text, no escape codes."""
    monkeypatch.setenv("NO_COLOR", "1")
    buf = io.StringIO()
    render(Console(file=buf, width=WIDTH), record([span("A", "belief", 0, 10, "x")]))
    out = buf.getvalue()
    assert "\x1b[" not in out and "A belief" in out
