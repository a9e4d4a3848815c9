"""Claims about interleavings: explores split into parts, judged as a whole."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.core.claims import Claim
from lab.core.profiles import Profile, profile_settings, setup_of
from lab.core.results import read_record
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.servers import Servers
from lab.verify import counterfactual as cf
from lab.verify.judge import ScenarioVerdicts, Trial, bare_verdict, evaluate, explore_claims

# --- claims about interleavings -----------------------------------------------------------

EXPLORE_CASE = "explore"
# Explores verify runs side by side (verify_explores): most of an explore's time is spent
# waiting for the server (a deadlock_timeout, a lock_timeout, a holder's pg_sleep). Every
# quick explore of the catalogue on this 2-core machine, idle: 39.7, 41.4 s at 2 parts at
# once; 32.5, 34.9, 38.7 s at 3; 34.3, 34.0 s at 4.
EXPLORES_AT_ONCE = 3


def _explore_verdicts(
    scenario: Scenario, profile: Profile, claims: Sequence[Claim], record: Mapping[str, Any]
) -> ScenarioVerdicts:
    return ScenarioVerdicts(
        scenario=scenario.id,
        title=scenario.title,
        profile=profile.name,
        knobs={},
        params={
            "isolation": record.get("isolation", []),
            "deadlock_timeout_ms": record.get("deadlock_timeout_ms"),
        },
        trials=1,
        verdicts=evaluate(
            claims,
            [Trial(1, record.get("variants", {}))],
            tuple(scenario.variants),
            setup_of(scenario, {"deadlock_timeout_ms": record.get("deadlock_timeout_ms")}, {}),
        ),
        case=EXPLORE_CASE,
    )


PART_INTERLEAVINGS = 60  # an explore part this big is worth a database of its own


def explore_parts(scenario: Scenario, plan: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """The scenario's variants to explore, packed in order into parts of at least
    PART_INTERLEAVINGS interleavings (counted per isolation level): each part gets its own
    database (a CREATE DATABASE costs about as much as 3-10 interleavings), and parts run
    side by side when lanes are free, so one big scenario does not hold up the end."""
    from lab.pinned import pinned_of
    from lab.pinned.permutations import count_interleavings

    pinned = pinned_of(scenario)
    parts: list[list[str]] = [[]]
    size = 0
    for v, levels in plan.items():
        if size >= PART_INTERLEAVINGS:
            parts.append([])
            size = 0
        parts[-1].append(v)
        size += count_interleavings(pinned.steps_of(v)) * max(1, len(levels))
    return parts


def explore_plan(
    scenario: Scenario, profile: Profile, counterfactual: bool = False
) -> tuple[list[Claim], dict[str, list[str]]]:
    """The scenario's explore claims under `profile` and what they need explored: each
    variant they name (with `counterfactual`, also each variant their counterfactuals
    read, a code mutant among them), at the isolation levels they name it at."""
    from lab.core.steps import ISOLATION_LEVELS

    claims = explore_claims(scenario, profile)
    names = tuple(scenario.variants)

    def reads(c: Claim) -> set[str]:
        return set(c.variants) | (cf.swapped_variants(c, names) if counterfactual else set())

    plan = {
        v: [lv for lv in ISOLATION_LEVELS if any(lv in c.levels for c in claims if v in reads(c))]
        for v in (*scenario.variants, *scenario.mutants)
        if any(v in reads(c) for c in claims)
    }
    return claims, plan


async def explore_part(
    scenario: Scenario,
    profile: Profile,
    servers: Servers,
    variants: Sequence[str],
    *,
    run_id: str,
    part: int,
    counterfactual: bool = False,
) -> dict[str, Any]:
    """One part of a scenario's explore (explore_parts): its variants' explore record, at
    the profile's deadlock_timeout, on a database of its own."""
    from lab.pinned import explore, pinned_of

    pinned_of(scenario)
    _, plan = explore_plan(scenario, profile, counterfactual)
    knobs, _ = profile_settings(scenario, profile)
    return await explore(
        scenario,
        servers,
        {v: plan[v] for v in variants},
        run_id=run_id,
        deadlock_ms=knobs.deadlock_timeout_ms,
        lane=f"_{part}",
    )


def explore_failed(scenario: Scenario, profile: Profile, error: str) -> ScenarioVerdicts:
    """The explore claims of a scenario whose explore failed: not held, saying why."""
    result = _explore_verdicts(scenario, profile, [], {})
    result.error = error
    result.verdicts = [
        {
            **bare_verdict(c),
            "held": False,
            "judged": True,
            "status": "not held",
            "trials_asked": 1,
            "measured": f"explore failed: {error}",
        }
        for c in explore_claims(scenario, profile)
    ]
    return result


def judge_explore(
    scenario: Scenario,
    profile: Profile,
    parts: Sequence[Mapping[str, Any]],
    *,
    write: bool,
    wall_s: float,
) -> ScenarioVerdicts:
    """The explore claims judged on the parts' records, merged into one (and written)."""
    from lab.pinned import merge_explores, write_explore

    record = merge_explores(parts)
    if write:
        write_explore(record)
    result = _explore_verdicts(scenario, profile, explore_claims(scenario, profile), record)
    result.wall_s = wall_s
    return result


async def verify_explore(
    scenario: Scenario,
    profile: Profile,
    servers: Servers,
    *,
    run_id: str,
    write: bool = True,
    on_step: Callable[[str], None] | None = None,
    gate: asyncio.Semaphore | None = None,
    counterfactual: bool = False,
) -> ScenarioVerdicts | None:
    """Run explore for the variants the scenario's explore claims name (at its isolation
    axis and the profile's deadlock_timeout), then judge those claims on the record.

    Each variant is explored on a database of its own, holding `gate` (lanes shared with
    other scenarios' explores) while it runs; the parts merge into one explore record.
    Its wall time counts from its first part's start: not the wait for a lane."""
    claims, plan = explore_plan(scenario, profile, counterfactual)
    if not claims:
        return None
    lanes = gate or asyncio.Semaphore(1)
    began: list[float] = []

    async def part(i: int, variants: Sequence[str]) -> dict[str, Any]:
        async with lanes:
            began.append(time.perf_counter())
            return await explore_part(
                scenario,
                profile,
                servers,
                variants,
                run_id=run_id,
                part=i,
                counterfactual=counterfactual,
            )

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(part(i, p)) for i, p in enumerate(explore_parts(scenario, plan))
            ]
    except BaseExceptionGroup as failed:
        first = failed.exceptions[0]
        if isinstance(first, LabError):
            raise first from None
        return explore_failed(scenario, profile, f"{type(first).__name__}: {first}")
    wall = time.perf_counter() - min(began)
    result = judge_explore(scenario, profile, [t.result() for t in tasks], write=write, wall_s=wall)
    if on_step is not None:
        on_step(f"{scenario.id}: explore done")
    return result


async def verify_explores(
    scenarios: Sequence[Scenario],
    profile: Profile,
    servers: Servers,
    *,
    run_id: str,
    write: bool = True,
    on_step: Callable[[str], None] | None = None,
    at_once: int = EXPLORES_AT_ONCE,
    counterfactual: bool = False,
) -> list[ScenarioVerdicts]:
    """verify_explore for each scenario, `at_once` variant explores side by side (of any
    scenarios); the results in the scenarios' order (those with no explore claim give none).

    Only explores overlap, and only each other: each has its own database and Redis
    prefix, and its verdicts count interleavings whose order the sequencer forces by what
    the server reports (a session blocked, a step finished), not by time. This is verify
    in the lab's own process (one lane); lab/verify/lanes.py runs loads side by side too."""
    gate = asyncio.Semaphore(max(1, at_once))

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(
                    verify_explore(
                        sc,
                        profile,
                        servers,
                        run_id=run_id,
                        write=write,
                        on_step=on_step,
                        gate=gate,
                        counterfactual=counterfactual,
                    )
                )
                for sc in scenarios
            ]
    except BaseExceptionGroup as failed:  # the first failure, as a sequential loop raised it
        raise failed.exceptions[0] from None
    return [r for t in tasks if (r := t.result()) is not None]


def recorded_explore(
    folder: Path, catalogue: Mapping[str, Scenario], profile: Profile, only: Sequence[str] = ()
) -> list[ScenarioVerdicts]:
    """The explore claims judged again on the explore records of a recorded run."""
    from lab.pinned import EXPLORE_DIR

    out = []
    for path in sorted((folder / EXPLORE_DIR).glob("*.json")):
        record = read_record(path)
        scenario = catalogue.get(str(record.get("scenario")))
        if scenario is None or (only and scenario.id not in only):
            continue
        claims = explore_claims(scenario, profile)
        if claims:
            out.append(_explore_verdicts(scenario, profile, claims, record))
    return out
