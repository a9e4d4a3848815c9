"""The report's drawing module: SVG building blocks (Scale, axis, rect/line/text) and
the charts of `locklab report` (outcome, bar, latency, matrix, timeline and scale charts).

Every function returns one self-contained `<svg>` string (or "" when there is nothing to
draw), each value escaped here: this is the one module of lab/output that writes markup
in Python; the page around the charts is a template (lab/output/html.py).

The package: ``blocks``, ``charts``, ``timeline``, ``bench``; what is public is re-exported here.
"""

from __future__ import annotations

from lab.output.svg.bench import scale_chart
from lab.output.svg.blocks import (
    LABEL_CHARS_PX,
    OUTCOME_COLOURS,
    PALETTE,
    PUBLISHED_COLOUR,
    ROW_H,
    WHO_COLOURS,
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
    who_colour,
)
from lab.output.svg.charts import MatrixRow, bar_chart, latency_chart, matrix_chart, outcome_chart
from lab.output.svg.timeline import timeline_chart, timeline_parts

__all__ = [
    "LABEL_CHARS_PX",
    "OUTCOME_COLOURS",
    "PALETTE",
    "PUBLISHED_COLOUR",
    "ROW_H",
    "WHO_COLOURS",
    "WIDTH",
    "MatrixRow",
    "Scale",
    "axis",
    "bar_chart",
    "esc",
    "fmt_num",
    "label_width",
    "latency_chart",
    "line",
    "matrix_chart",
    "outcome_chart",
    "outcome_colour",
    "rect",
    "scale_chart",
    "svg",
    "text",
    "timeline_chart",
    "timeline_parts",
    "variant_colour",
    "who_colour",
]
