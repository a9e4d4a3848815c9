"""The report page from its template: `render(page)` lays a `Page` (report_view) out with
jinja2, autoescaping every value; `write_report` does it for a recorded run.

The template, its style and its check script are package data (templates/), so an
installed locklab renders the same page as a checkout.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2

from lab.core.records import Record
from lab.core.results import load_run, read_record, run_folder, write_text
from lab.output.report_view import Page, page_view
from lab.output.trace_svg import Picture
from lab.verify import ScenarioVerdicts, load_verdicts

TEMPLATE = "report.html.j2"


@functools.cache
def environment() -> jinja2.Environment:
    """One environment per process: templates from the package, every value escaped, an
    undefined name an error instead of an empty string."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("lab.output", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(page: Page) -> str:
    """The whole page as one string (pure: a view model in, HTML out)."""
    return environment().get_template(TEMPLATE).render(page=page)


def render_records(
    records: Sequence[Record],
    run_id: str,
    verdicts: Sequence[ScenarioVerdicts] | None = None,
    bench: Mapping[str, Any] | None = None,
    pinned: Sequence[Picture] = (),
) -> str:
    """Records (and what else a run folder holds) to the page, through the view model."""
    return render(page_view(records, run_id, verdicts, bench, pinned))


def write_report(ref: str, out: Path | None = None) -> Path:
    """Render a recorded run (its id or folder) to `out`, default `<run folder>/report.html`."""
    from lab.output.pictures import drawn_runs

    folder = run_folder(ref)
    scale = folder / "bench" / "scale.json"
    bench = read_record(scale) if scale.is_file() else None
    pinned = drawn_runs(folder)
    top = any(folder.glob("*.json"))
    records = load_run(str(folder)) if top or (bench is None and not pinned) else []
    page = render_records(records, folder.name, load_verdicts(folder), bench, pinned)
    return write_text(out or folder / "report.html", page)
