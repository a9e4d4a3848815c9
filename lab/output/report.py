"""`locklab report RUN`: one self-contained HTML page with inline SVG charts.

The page is built in lab/output/: the records become a typed view model
(lab.output.report_view), which a jinja2 template lays out (lab.output.html); the charts
are drawn by lab.output.svg. This module keeps the names callers import from here.

No network, no external scripts or fonts: charts are inline SVG, styles are inline, and
a Content-Security-Policy forbids anything else. One tiny inline script marks the page
as rendered (and counts script errors) so a headless browser test can check it.
"""

from __future__ import annotations

from lab.output.html import render_records as render
from lab.output.html import write_report
from lab.output.published_numbers import Published, parse_published, published_of
from lab.output.report_view import EvidenceRow, evidence_rows, page_view
from lab.output.svg import (
    Scale,
    bar_chart,
    latency_chart,
    matrix_chart,
    outcome_chart,
    scale_chart,
    timeline_chart,
)

__all__ = [
    "EvidenceRow",
    "Published",
    "Scale",
    "bar_chart",
    "evidence_rows",
    "latency_chart",
    "matrix_chart",
    "outcome_chart",
    "page_view",
    "parse_published",
    "published_of",
    "render",
    "scale_chart",
    "timeline_chart",
    "write_report",
]
