"""verify's plan as jobs for the lanes: what each is, in what order they go, and which may run next beside the ones running."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.core.profiles import Profile
from lab.core.scenario import Scenario

EXPLORE_CONNECTIONS = 16  # a pinned lab's sessions, its watch and admin connections


@dataclass(frozen=True)
class Job:
    """One unit of verify's work, and what it holds while it runs."""

    index: int
    scenario: Scenario
    case: str = ""
    part: int = -1  # an explore part's index; -1: a (scenario, case) load
    variants: tuple[str, ...] = ()  # an explore part's variants
    connections: int = 0  # PostgreSQL server connections it takes at most
    redis: bool = False  # keeps Redis's server-wide counters in its records
    alone: bool = False  # runs with nothing beside it
    timed: bool = False  # runs beside other timed jobs only
    runs: int = 1  # variant runs, every trial counted (a load)

    @property
    def key(self) -> str:
        return f"{self.scenario.id}|{self.case}" + (
            f"|explore-{self.part}" if self.part >= 0 else ""
        )

    @property
    def name(self) -> str:
        if self.part >= 0:
            return f"{self.scenario.id} explore part {self.part + 1}"
        return f"{self.scenario.id} [{self.case}]" if self.case else self.scenario.id

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "scenario": self.scenario.id,
            "case": self.case,
            "part": self.part,
            "variants": list(self.variants),
        }


def plan_jobs(
    scenarios: Sequence[Scenario],
    profile: Profile,
    trials: int | None,
    counterfactual: bool = False,
) -> list[Job]:
    """verify's loads (lab.verify.verify_plan), then every explore part, as jobs."""
    from lab.core.profiles import profile_settings
    from lab.load.plan import pg_connections
    from lab.verify import explore_parts, explore_plan, variant_runs, verify_plan

    jobs: list[Job] = []
    for sc, case in verify_plan(scenarios, profile, trials):
        knobs, _ = profile_settings(sc, profile, 1, case)
        runs = variant_runs(sc, profile, trials, case, counterfactual)
        jobs.append(
            Job(
                len(jobs),
                sc,
                case,
                connections=pg_connections(sc, knobs),
                redis="redis" in sc.uses,
                alone=case in sc.alone,
                timed=case in sc.timed,
                runs=runs,
            )
        )
    for sc in scenarios:
        claims, plan = explore_plan(sc, profile, counterfactual)
        if claims:
            for i, part in enumerate(explore_parts(sc, plan)):
                jobs.append(
                    Job(
                        len(jobs),
                        sc,
                        part=i,
                        variants=tuple(part),
                        connections=EXPLORE_CONNECTIONS,
                        redis="redis" in sc.uses,
                    )
                )
    return jobs


EXPLORE_PART_S = 6.0  # a guess at an explore part's seconds, with no verify recorded


RUN_S = 1.0  # a guess at one variant run's seconds


def past_seconds(profile: Profile, root: Path | None = None) -> dict[str, float]:
    """What each job took (by Job.key) in the newest recorded verify of `profile` that ran
    on lanes, to hand out the longest first; empty when there is none."""
    from lab.core.results import results_root
    from lab.verify import VERDICTS_FILE

    base = root or results_root()
    if not base.is_dir():
        return {}
    for folder in sorted((p for p in base.iterdir() if p.name[:1].isdigit()), reverse=True)[:30]:
        try:
            data = json.loads((folder / VERDICTS_FILE).read_text())
        except (OSError, ValueError):
            continue
        if data.get("summary", {}).get("profile") == profile.name and data.get("schedule"):
            return {
                str(e["job"]): float(e["end_s"]) - float(e["start_s"]) for e in data["schedule"]
            }
    return {}


def order(jobs: Sequence[Job], past: Mapping[str, float] | None = None) -> list[Job]:
    """The order lanes take jobs in: the runs that need the machine first (each alone),
    then the timed runs (together), then the Redis runs (on a shared Redis one at a time:
    their chain starts early), then the longest first (what each took last time, `past`;
    else a guess from its variant runs)."""
    seen = past or {}

    def guess(j: Job) -> float:
        return seen.get(j.key, EXPLORE_PART_S if j.part >= 0 else RUN_S * j.runs)

    return sorted(jobs, key=lambda j: (not j.alone, not j.timed, not j.redis, -guess(j), j.index))


def pick(
    queue: Sequence[Job], running: Sequence[Job], free_connections: int, shared_redis: bool = True
) -> Job | None:
    """The first job of `queue` that may start beside `running` (see the module doc);
    `shared_redis`: the lanes use one Redis server."""
    if any(j.alone for j in running):
        return None
    redis_busy = shared_redis and any(j.redis for j in running)
    timed_only = any(j.timed for j in running)
    used = sum(j.connections for j in running)
    for job in queue:
        if job.alone:
            if not running:
                return job
            return None  # it waits for every lane to empty; nothing overtakes it
        if timed_only and not job.timed:
            continue
        if job.timed and running and not timed_only:
            return None  # it waits for the CPU-bound runs to end; nothing overtakes it
        if job.redis and redis_busy:
            continue
        if running and used + job.connections > free_connections:
            continue
        return job
    return None
