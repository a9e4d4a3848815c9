"""`locklab trace`: schedules run one by one, their record, their picture."""

from __future__ import annotations

import datetime as dt
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lab import __version__
from lab.errors import LabError
from lab.pinned.database import pinned_lab
from lab.pinned.schedules import EXPLORE_DIR, TRACE_DIR, PinnedResult
from lab.results import (
    SCHEMA_VERSION,
    git_commit,
    read_record,
    results_root,
    write_json,
    write_text,
)
from lab.scenario import Scenario
from lab.servers import Servers
from lab.trace_svg import Picture, document, picture_of

# --- trace -------------------------------------------------------------------------------


async def trace(
    scenario: Scenario,
    servers: Servers,
    runs: Sequence[tuple[str, str, tuple[str, ...]]],
    isolations: Sequence[str],
    *,
    run_id: str,
    deadlock_ms: int,
    on_result: Callable[[PinnedResult], None] | None = None,
) -> list[PinnedResult]:
    """Each (variant, schedule) at each isolation level, in order."""
    out = []
    async with pinned_lab(scenario, servers, run_id, deadlock_ms) as lab:
        for variant, name, steps in runs:
            for iso in isolations:
                res = await lab.run(variant, steps, isolation=iso, name=name)
                out.append(res)
                if on_result is not None:
                    on_result(res)
    return out


def trace_record(
    scenario: Scenario,
    servers: Servers,
    results: Sequence[PinnedResult],
    *,
    run_id: str,
    deadlock_ms: int,
) -> dict[str, Any]:
    """The trace's record: each run (variant, level, transcript, timing); `draw_svg` adds
    the file it drew them into."""
    return {
        "schema": SCHEMA_VERSION,
        "kind": "trace",
        "run_id": run_id,
        "scenario": scenario.id,
        "title": scenario.title,
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "deadlock_timeout_ms": deadlock_ms,
        "servers": {i.product: i.to_json() for i in servers.infos()},
        "lab": {
            "version": __version__,
            "git_commit": git_commit(),
            "python": platform.python_version(),
        },
        "svg": None,
        "runs": [{"variant": r.variant, "isolation": r.isolation, **r.to_json()} for r in results],
    }


def write_trace(record: Mapping[str, Any]) -> Path:
    path = results_root() / record["run_id"] / TRACE_DIR / f"{record['scenario']}.json"
    return write_json(path, record)


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
