"""`locklab explore`: every interleaving per variant and isolation level, as one record."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.core.provenance import lab_info
from lab.core.records import ExploreCell
from lab.core.results import (
    SCHEMA_VERSION,
    results_root,
    write_json,
)
from lab.core.scenario import Scenario
from lab.core.steps import ISOLATION_LEVELS, Pinned
from lab.pinned.database import PinnedLab, pinned_lab
from lab.pinned.permutations import count_interleavings, interleavings, prefixed
from lab.pinned.reduce import Classes
from lab.pinned.schedules import EXPLORE_DIR, STEP_ERROR, PinnedResult, pinned_of
from lab.pinned.stage import Staged
from lab.servers import Servers

# --- explore -----------------------------------------------------------------------------


def _cell(results: Sequence[PinnedResult], total: int, invalid: int) -> ExploreCell:
    ran = [r for r in results if not r.invalid]
    broke = [r for r in ran if not r.kept]
    states = Counter(o for r in ran for o in r.outcomes.values() if o[:1].isdigit())
    first_broken = next((r for r in broke), None)
    first_error = next((r for r in ran if any(o[:1].isdigit() for o in r.outcomes.values())), None)
    return {
        "interleavings": total,
        "ran": len(ran),
        "invalid": invalid,
        "kept": len(ran) - len(broke),
        "broke": len(broke),
        "outcomes": dict(Counter(r.signature for r in ran).most_common()),
        "broke_by": dict(Counter(r.signature for r in broke).most_common()),
        # interleavings in which the server showed some step blocked, and which steps
        "waited": sum(1 for r in ran if r.waited),
        "waited_steps": dict(sorted(Counter(w for r in ran for w in r.waited).items())),
        "broken_invariants": dict(
            Counter(c.name for r in broke for c in r.checks if not c.held).most_common()
        ),
        # interleavings in which some session ended with this SQLSTATE
        "sqlstates": dict(
            sorted(
                Counter(o for r in ran for o in set(r.outcomes.values()) if o[:1].isdigit()).items()
            )
        ),
        "sqlstate_sessions": dict(sorted(states.items())),
        # interleavings in which some step raised this SQLSTATE, even if its session then
        # retried and ended well (a deadlock's loser that retried)
        "step_sqlstates": dict(
            sorted(Counter(e for r in ran for e in set(STEP_ERROR.findall(r.transcript))).items())
        ),
        "first_failing": first_broken.to_json() if first_broken else None,
        "first_error": first_error.to_json() if first_error else None,
    }


async def explore(
    scenario: Scenario,
    servers: Servers,
    plan: Mapping[str, Sequence[str]],
    *,
    run_id: str,
    deadlock_ms: int,
    on_progress: Callable[[str], None] | None = None,
    lane: str = "",
    reduce: bool = False,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every interleaving of each variant's declared steps at each of its isolation levels
    (`plan`: variant -> levels), and its canonical schedules; the explore record (see the
    module doc). `lane` names this explore's database apart from others of the same
    scenario running at the same time (see merge_explores). With `reduce`, one
    interleaving of each set of equivalent ones (lab/pinned/reduce.py), where the server
    sees every step (no Redis, no worker processes). `params`: the -p given, recorded."""
    pinned = pinned_of(scenario)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    by_variant: dict[str, dict[str, Any]] = {}
    async with pinned_lab(scenario, servers, run_id, deadlock_ms, lane, params) as lab:
        for variant, levels in plan.items():
            # a cast may interleave fewer steps than its schedules name (lab/pinned/stage.py)
            steps = getattr(pinned, "explore_steps", {}).get(variant) or pinned.steps_of(variant)
            total = count_interleavings(steps)
            cells: dict[str, Any] = {}
            for iso in levels:
                if pinned.canonical_only:
                    cells[iso] = await _canonical_cell(lab, pinned, variant, iso)
                    if on_progress is not None:
                        on_progress(f"{scenario.id}: {variant} at {iso} done")
                    continue
                if reduce and _reducible(scenario):
                    results, invalid, alike = await _reduced(lab, variant, steps, iso)
                    cell = _cell(results, total, invalid)
                    cell["reduction"] = {"equivalent": alike}
                else:
                    results, invalid = await _every(lab, variant, steps, iso)
                    cell = _cell(results, total, invalid)
                cell["canonical"] = {
                    name: (await lab.run(variant, s, isolation=iso, name=name)).to_json()
                    for name, s in pinned.schedules_of(variant).items()
                }
                cells[iso] = cell
                if on_progress is not None:
                    on_progress(f"{scenario.id}: {variant} at {iso} done")
            by_variant[variant] = {"variant": variant, "steps": dict(steps), "by_isolation": cells}
    levels_all = [x for x in ISOLATION_LEVELS if any(x in v for v in plan.values())]
    return {
        "schema": SCHEMA_VERSION,
        "kind": "explore",
        "run_id": run_id,
        "scenario": scenario.id,
        "title": scenario.title,
        "started_at": started,
        "deadlock_timeout_ms": deadlock_ms,
        "params": dict(params or {}),
        "isolation": levels_all,
        "servers": {i.product: i.to_json() for i in servers.infos()},
        "lab": lab_info(),
        "variants": by_variant,
    }


async def _every(
    lab: PinnedLab, variant: str, steps: Mapping[str, Sequence[str]], iso: str
) -> tuple[list[PinnedResult], int]:
    """Every interleaving run, but those that start as one found invalid; (results, how
    many were invalid)."""
    results: list[PinnedResult] = []
    dead: list[tuple[str, ...]] = []  # prefixes known to be invalid
    invalid = 0
    for sched in interleavings(steps):
        if prefixed(sched, dead):
            invalid += 1
            continue
        res = await lab.run(variant, sched, isolation=iso)
        if res.invalid:
            dead.append(sched[: res.invalid_at + 1])
            invalid += 1
        results.append(res)
    return results, invalid


def _reducible(scenario: Scenario) -> bool:
    """Whether the server sees every step: no Redis, no sessions in worker processes."""
    pinned = pinned_of(scenario)
    staged = isinstance(pinned, Staged) and pinned.processes is not None
    return "redis" not in scenario.uses and not staged


async def _reduced(
    lab: PinnedLab, variant: str, steps: Mapping[str, Sequence[str]], iso: str
) -> tuple[list[PinnedResult], int, int]:
    """One interleaving of each set of equivalent ones, in one pass: each is run unless a
    run so far covers it (lab/pinned/reduce.py); (results, invalid, how many were skipped
    as equivalent)."""
    classes = Classes()
    results: list[PinnedResult] = []
    dead: list[tuple[str, ...]] = []
    invalid = cut = alike = 0
    for sched in interleavings(steps):
        if prefixed(sched, dead):
            cut += 1  # invalid, not run
            continue
        if classes.covered(sched):
            alike += 1
            continue
        res = await lab.run(variant, sched, isolation=iso, observe=True)
        results.append(res)
        if res.invalid:
            dead.append(sched[: res.invalid_at + 1])
            invalid += 1
        else:
            classes.learn(sched, res.footprints)
    return results, invalid + cut, alike


async def _canonical_cell(lab: PinnedLab, pinned: Pinned, variant: str, iso: str) -> ExploreCell:
    """A cell of a canonical-only explore: the canonical schedules are the runs counted."""
    runs = {
        name: await lab.run(variant, s, isolation=iso, name=name)
        for name, s in pinned.schedules_of(variant).items()
    }
    cell = _cell(list(runs.values()), len(runs), 0)
    cell["canonical_only"] = True
    cell["canonical"] = {name: r.to_json() for name, r in runs.items()}
    return cell


def merge_explores(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One explore record from explores of the same scenario, each of some of its
    variants (run side by side): the variants in the parts' order, every level any ran."""
    merged = dict(parts[0])
    merged["variants"] = {v: cell for p in parts for v, cell in p["variants"].items()}
    merged["isolation"] = [x for x in ISOLATION_LEVELS if any(x in p["isolation"] for p in parts)]
    merged["started_at"] = min(str(p["started_at"]) for p in parts)
    return merged


def explore_path(run_id: str, scenario: str, root: Path | None = None) -> Path:
    return (root or results_root()) / run_id / EXPLORE_DIR / f"{scenario}.json"


def write_explore(record: Mapping[str, Any]) -> Path:
    return write_json(explore_path(record["run_id"], record["scenario"]), record)
