"""Pictures of pinned runs: what a trace or explore record draws (lab.output.trace_svg),
`--svg FILE` checked before a server starts, and the pictures of a run's folder for the
report."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lab.core.results import read_record, write_text
from lab.errors import LabError
from lab.output.trace_svg import Picture, document, picture_of
from lab.pinned.schedules import EXPLORE_DIR, TRACE_DIR


def drawn_of(record: Mapping[str, Any]) -> list[Picture]:
    """What a trace or explore record draws: every traced run; each explored cell's first
    failing schedule (else its first with an error). Runs without times draw nothing."""
    scenario = record.get("scenario")
    runs: list[tuple[str, Mapping[str, Any]]] = [
        (f"locklab trace {scenario}", run) for run in record.get("runs") or []
    ]
    for variant, entry in (record.get("variants") or {}).items():
        for iso, cell in (entry.get("by_isolation") or {}).items():
            first = cell.get("first_failing") or cell.get("first_error")
            why = "first failing" if cell.get("first_failing") else "first with an error"
            if first:
                runs.append((f"locklab explore {scenario}: {variant} at {iso}, {why}", first))
    return [p for caption, run in runs if (p := picture_of(run, caption)) is not None]


def drawn_runs(folder: Path) -> list[Picture]:
    """The pictures of the trace and explore records in a run's folder (for the report)."""
    paths = sorted((folder / TRACE_DIR).glob("*.json")) + sorted(
        (folder / EXPLORE_DIR).glob("*.json")
    )
    return [p for path in paths for p in drawn_of(read_record(path))]


def svg_target(spec: str) -> Path:
    """--svg FILE, checked before any server starts: a file in a folder that can be written."""
    path = Path(spec)
    if path.is_dir():
        raise LabError(f"--svg {spec}: is a folder; give a file name (out.svg)")
    folder = path.parent
    if not folder.is_dir():
        raise LabError(f"--svg {spec}: no folder {str(folder)!r}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise LabError(f"--svg {spec}: cannot write there")
    return path


def draw_svg(record: dict[str, Any], svg: Path) -> str:
    """Draw what `record` draws (drawn_of) into `svg` and note the file in the record;
    what to tell the user (an explore in which nothing failed draws nothing)."""
    pictures = drawn_of(record)
    if not pictures:
        return f"no picture: no schedule failed or raised an error, {svg} not written"
    record["svg"] = str(svg)
    return f"picture: {write_text(svg, document(pictures))}"
