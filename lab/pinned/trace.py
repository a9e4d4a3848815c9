"""`locklab trace`: schedules run one by one, their record, their picture."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.core.provenance import lab_info
from lab.core.results import (
    SCHEMA_VERSION,
    results_root,
    write_json,
)
from lab.core.scenario import Scenario
from lab.pinned.database import pinned_lab
from lab.pinned.schedules import TRACE_DIR, PinnedResult
from lab.servers import Servers

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
    params: Mapping[str, Any] | None = None,
) -> list[PinnedResult]:
    """Each (variant, schedule) at each isolation level, in order; `params`: the -p given."""
    out = []
    async with pinned_lab(scenario, servers, run_id, deadlock_ms, params=params) as lab:
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
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The trace's record: each run (variant, level, transcript, timing), the -p given;
    `draw_svg` adds the file it drew them into."""
    return {
        "schema": SCHEMA_VERSION,
        "kind": "trace",
        "run_id": run_id,
        "scenario": scenario.id,
        "title": scenario.title,
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "deadlock_timeout_ms": deadlock_ms,
        "params": dict(params or {}),
        "servers": {i.product: i.to_json() for i in servers.infos()},
        "lab": lab_info(),
        "svg": None,
        "runs": [{"variant": r.variant, "isolation": r.isolation, **r.to_json()} for r in results],
    }


def write_trace(record: Mapping[str, Any]) -> Path:
    path = results_root() / record["run_id"] / TRACE_DIR / f"{record['scenario']}.json"
    return write_json(path, record)
