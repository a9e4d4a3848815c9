"""`verify --matrix`: the claims judged on every server version this machine has.

Printed the way Hermitage prints anomalies x databases: one row per claim id, one column
per server build, each cell the claim's verdict there (held / NOT HELD / not judged /
ERROR when its scenario failed to run on that build), and a last column saying whether
the versions agree. PostgreSQL columns run every scenario that uses PostgreSQL on that
build (with the default Redis); Redis columns run every scenario that uses Redis on that
build (with the default PostgreSQL).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.core.profiles import Profile
from lab.core.results import results_root, write_json
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.servers.versions import Available, open_for, pg_available, redis_available
from lab.verify import (
    ScenarioVerdicts,
    explore_claims,
    id_key,
    judge_across,
    save_verdicts,
    status_of,
    summarize,
    verify_explore,
    verify_plan,
    verify_scenario,
)
from lab.verify.command import runnable

MATRIX_FILE = "matrix/matrix.json"  # in a subfolder: not read as a run record


@dataclass(frozen=True)
class Column:
    """One server build to judge the claims on; the other server stays the default."""

    label: str
    pg_version: str | None
    redis_version: str | None
    uses: str  # "pg" or "redis": the scenarios this column runs


def columns(
    scenarios: Sequence[Scenario],
    pg: Sequence[Available] | None = None,
    redis: Sequence[Available] | None = None,
) -> list[Column]:
    """A column per PostgreSQL build (if a scenario uses PostgreSQL), then a column per
    Redis build (if one uses Redis), the default one included: a Redis-only scenario runs
    in no PostgreSQL column."""
    pg = pg_available() if pg is None else pg
    redis = redis_available() if redis is None else redis
    cols: list[Column] = []
    if any("pg" in s.uses for s in scenarios):
        cols += [Column(a.label, a.version, None, "pg") for a in pg]
    if any("redis" in s.uses for s in scenarios):
        default_pg = pg[0].version if pg else None
        cols += [Column(a.label, default_pg, a.label, "redis") for a in redis]
    if not cols:
        raise LabError("verify --matrix: no server builds found (see `locklab doctor`)")
    return cols


@dataclass
class Matrix:
    columns: list[Column]
    # column label -> that column's verify results
    results: dict[str, list[ScenarioVerdicts]] = field(default_factory=dict)
    versions: dict[str, list[str]] = field(default_factory=dict)  # label -> server lines

    def cells(self) -> dict[str, dict[str, str]]:
        """claim id -> column label -> held | not held | not judged | error (the scenario
        failed to run there); a column without the claim did not run its scenario."""
        out: dict[str, dict[str, str]] = {}
        for label, results in self.results.items():
            by_id: dict[str, list[str]] = {}
            for r in results:
                for v in r.verdicts:
                    by_id.setdefault(v["id"], []).append(_status(r, v))
            for cid, statuses in by_id.items():
                if "error" in statuses:
                    cell = "error"
                elif "not held" in statuses:
                    cell = "not held"
                elif "held" in statuses:
                    cell = "held"
                else:
                    cell = "not judged"
                out.setdefault(cid, {})[label] = cell
        return dict(sorted(out.items(), key=lambda kv: id_key(kv[0])))

    def differing(self) -> list[dict[str, Any]]:
        """Each verdict whose status is not the same on every column that judged it."""
        rows: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        for label, results in self.results.items():
            for r in results:
                for v in r.verdicts:
                    key = (r.scenario, r.case, v["id"], v["text"])
                    row = rows.setdefault(
                        key,
                        {"scenario": r.scenario, "case": r.case, "id": v["id"], "text": v["text"]},
                    )
                    row.setdefault("by_column", {})[label] = {
                        "status": _status(r, v),
                        "measured": str(v.get("measured", "")),
                    }
        out = []
        for row in rows.values():
            judged = {c["status"] for c in row["by_column"].values() if c["status"] != "not judged"}
            if len(judged) > 1:
                out.append(row)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "columns": [c.__dict__ for c in self.columns],
            "servers": self.versions,
            "cells": self.cells(),
            "differs": self.differing(),
            "summaries": {
                label: summarize(res, res[0].profile if res else "").to_json()
                for label, res in self.results.items()
            },
        }


def _status(r: ScenarioVerdicts, v: Mapping[str, Any]) -> str:
    """A verdict's status, or "error" when its scenario did not run on this build (a
    feature the version lacks, say): a failed run is not a claim found not to hold."""
    return "error" if r.error else status_of(v)


def row_verdict(cells: Mapping[str, str]) -> str:
    """same (every column that judged it agrees) or differs."""
    judged = {c for c in cells.values() if c != "not judged"}
    return "differs" if len(judged) > 1 else "same"


def run_matrix(
    scenarios: Sequence[Scenario],
    profile: Profile,
    cols: Sequence[Column],
    *,
    run_id: str,
    seed: int,
    trials: int | None,
    write: bool,
    on_column: Callable[[Column, int], None] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> Matrix:
    """Verify `scenarios` once per column, each on servers of that column's versions."""
    matrix = Matrix(list(cols))
    for i, col in enumerate(cols):
        chosen, not_run = runnable([s for s in scenarios if col.uses in s.uses], profile, None)
        if on_column is not None:
            on_column(col, i)
        results: list[ScenarioVerdicts] = []
        col_run = f"{run_id}/{col.label}"
        with open_for(
            None,
            None,
            col.pg_version,
            col.redis_version,
            need_pg=any("pg" in s.uses for s in chosen),
            need_redis=any("redis" in s.uses for s in chosen),
            need_pgbouncer=any("pgbouncer" in s.uses for s in chosen),
        ) as srv:
            matrix.versions[col.label] = [i.line() for i in srv.infos()]
            for sc, case in verify_plan(chosen, profile, trials):
                res = asyncio.run(
                    verify_scenario(
                        sc,
                        profile,
                        srv,
                        run_id=col_run,
                        seed=seed,
                        trials=trials,
                        write=write,
                        on_step=on_step,
                        case=case,
                    )
                )
                results.append(res)
            for sc in chosen:  # claims about every interleaving, judged on this column too
                if explore_claims(sc, profile):
                    ex = asyncio.run(
                        verify_explore(
                            sc, profile, srv, run_id=col_run, write=write, on_step=on_step
                        )
                    )
                    if ex is not None:
                        results.append(ex)
        for sc in chosen:
            if (across := judge_across(sc, profile, results)) is not None:
                results.append(across)
        results += not_run
        matrix.results[col.label] = results
        if write:
            save_verdicts(col_run, results, summarize(results, profile.name))
    if write:
        write_json(results_root() / run_id / MATRIX_FILE, matrix.to_json())
    return matrix


CELL = {
    "held": "held",
    "not held": "[red]NOT HELD[/red]",
    "not judged": "[yellow]not judged[/yellow]",
    "error": "[red]ERROR[/red]",
}
