"""`locklab verify` as one call: open the servers the chosen scenarios need and run their
claims (on lanes, or here one after another) or judge a recorded run again, then the
claims across cases, the summary, the coverage line and the saved verdicts, as one typed
`VerifyRun`. The CLI parses, calls `verify_command` with where to show what it does
(`Display`), and prints what it returns."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from lab.core.profiles import Profile, profile_settings
from lab.core.results import new_run_id
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.servers import Servers, missing_pgbouncer
from lab.verify.judge import (
    ScenarioVerdicts,
    Summary,
    coverage,
    judge_across,
    missing_part,
    summarize,
)


class Progress(Protocol):
    """What verify tells the progress display: what runs now, and a step done."""

    def describe(self, text: str) -> None: ...

    def advance(self, text: str = "") -> None: ...


Say = Callable[[str], None]  # one line for the user (stderr), e.g. a run that failed


class Display(Protocol):
    """Where verify shows what it does: a line for the user, the servers it runs on, and a
    progress bar over its variant runs."""

    def say(self, line: str) -> None: ...

    def servers(self, servers: Servers) -> None: ...

    def progress(self, total: int) -> AbstractContextManager[Progress]: ...


@dataclass(frozen=True)
class VerifyOptions:
    """What `locklab verify` was asked, parsed: how to run and judge, and where the servers
    come from."""

    profile: Profile
    seed: int = 1
    trials: int | None = None  # every claim over this many trials instead of its own count
    lanes: int = 1  # asked for; `lanes_for` says how many can run
    write: bool = True
    counterfactual: bool = False
    recorded: str | None = None  # judge this recorded run again instead of running
    only: Sequence[str] = ()  # with `recorded`: the scenarios named (none: every one it has)
    pg_dsn: str | None = None
    redis_url: str | None = None
    pg_version: str | None = None
    redis_version: str | None = None


@dataclass
class VerifyRun:
    """What one verify did: its verdicts, their summary and what was written."""

    run_id: str  # "" for a recorded run judged again (its id is `recorded`)
    results: list[ScenarioVerdicts]
    summary: Summary
    coverage: str
    wall_s: float
    lanes: int = 1
    schedule: list[dict[str, Any]] = field(default_factory=list)
    recorded: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id or self.recorded,
            "summary": self.summary.to_json(),
            "wall_s": round(self.wall_s, 1),
            "lanes": self.lanes,
            "schedule": self.schedule,
            "coverage": self.coverage,
            "scenarios": [r.to_json() for r in self.results],
        }


def runnable(
    chosen: Sequence[Scenario], profile: Profile, pg_dsn: str | None
) -> tuple[list[Scenario], list[ScenarioVerdicts]]:
    """(the scenarios this machine can run, the others' claims not judged with why): a
    machine without PgBouncer judges every claim but PgBouncer's, as if those scenarios had
    not been asked for."""
    bouncer = [s for s in chosen if "pgbouncer" in s.uses]
    why = missing_pgbouncer(pg_dsn) if bouncer else None
    if why is None:
        return list(chosen), []
    return [s for s in chosen if s not in bouncer], [missing_part(s, profile, why) for s in bouncer]


def verify_command(
    chosen: Sequence[Scenario],
    asked: VerifyOptions,
    catalogue: Sequence[Scenario],
    display: Display,
) -> VerifyRun:
    """`locklab verify` once parsed: a recorded run judged again, or `chosen` run on the
    servers they need and judged (those this machine cannot run: not judged, with why);
    wall_s counts from this call."""
    started = time.perf_counter()
    if asked.recorded is not None:
        return verify_recorded_run(
            asked.recorded,
            asked.profile,
            catalogue,
            only=asked.only,
            trials=asked.trials,
            started=started,
        )
    chosen, not_run = runnable(chosen, asked.profile, asked.pg_dsn)
    if not chosen:  # asked for only what this machine cannot run
        raise LabError(not_run[0].missing)
    for r in not_run:
        display.say(f"locklab: {r.scenario} not judged: {r.missing}")
    return _run_and_judge(chosen, asked, catalogue, display, started, not_run)


def _run_and_judge(
    chosen: Sequence[Scenario],
    asked: VerifyOptions,
    catalogue: Sequence[Scenario],
    display: Display,
    started: float,
    not_run: Sequence[ScenarioVerdicts],
) -> VerifyRun:
    """verify's run: the servers opened and shown, on as many lanes as can run, the
    progress bar over every variant run; the servers stopped before it returns."""
    from lab.load.databases import drop_spares
    from lab.verify.lanes import lanes_for
    from lab.verify.run import steps

    total = sum(steps(s, asked.profile, asked.trials, asked.counterfactual) for s in chosen)
    with servers_needed(chosen, asked) as srv:
        display.servers(srv)
        # the spare database the last run made for one that did not come, before
        # the servers stop (kept or external ones would keep it)
        srv.stops.append(lambda: asyncio.run(drop_spares(srv)))
        width, why = lanes_for(asked.lanes, chosen, srv)
        if why:
            display.say(f"locklab: one lane: {why}")
        with display.progress(total) as bar:
            return run_verify(
                chosen,
                asked.profile,
                srv,
                catalogue,
                lanes=width,
                progress=bar,
                say=display.say,
                seed=asked.seed,
                trials=asked.trials,
                write=asked.write,
                counterfactual=asked.counterfactual,
                started=started,
                not_run=not_run,
            )


def servers_needed(chosen: Sequence[Scenario], asked: VerifyOptions) -> Servers:
    """Every server `chosen` needs (PgBouncer too when a profile connects through it), of
    the versions asked for (lab/servers/versions.py)."""
    from lab.servers.versions import open_for

    modes = [profile_settings(s, asked.profile)[0].connect for s in chosen]
    return open_for(
        asked.pg_dsn,
        asked.redis_url,
        asked.pg_version,
        asked.redis_version,
        need_pg=any("pg" in s.uses for s in chosen),
        need_redis=any("redis" in s.uses for s in chosen),
        need_pgbouncer=any(m.startswith("pgbouncer-") for m in modes)
        or any("pgbouncer" in s.uses for s in chosen),
    )


def verify_recorded_run(
    recorded: str,
    profile: Profile,
    catalogue: Sequence[Scenario],
    *,
    only: Sequence[str],
    trials: int | None,
    started: float | None = None,
) -> VerifyRun:
    """The claims judged again on a recorded run's records (nothing runs, nothing is
    written). `started`: the command's start (perf_counter), where wall_s counts from."""
    from lab.verify.store import verify_recorded

    started = time.perf_counter() if started is None else started
    by_id = {s.id: s for s in catalogue}
    results = verify_recorded(recorded, by_id, profile, list(only), trials)
    return _concluded("", results, profile, catalogue, started, write=False, recorded=recorded)


def run_verify(
    chosen: Sequence[Scenario],
    profile: Profile,
    servers: Servers,
    catalogue: Sequence[Scenario],
    *,
    lanes: int,
    progress: Progress,
    say: Say,
    seed: int,
    trials: int | None,
    write: bool,
    counterfactual: bool = False,
    started: float | None = None,
    not_run: Sequence[ScenarioVerdicts] = (),
) -> VerifyRun:
    """Run and judge `chosen` under `profile` on `servers`: on `lanes` lane processes
    (lab/verify/lanes.py) or, with one, here; then the claims that compare a scenario's
    cases, the summary, and (with `write`) the verdicts beside the records. `started`: the
    command's start (perf_counter; its servers' start counts), where wall_s counts from.
    `not_run`: the verdicts of scenarios this machine cannot run (`runnable`)."""
    from lab.verify.jobs import plan_jobs
    from lab.verify.lanes import run_lanes

    started = time.perf_counter() if started is None else started
    run_id = new_run_id()
    schedule: list[dict[str, Any]] = []
    if lanes > 1:
        progress.describe(f"verify {profile.name} on {lanes} lanes")
        results = asyncio.run(
            run_lanes(
                plan_jobs(chosen, profile, trials, counterfactual),
                lanes,
                servers,
                profile=profile,
                run_id=run_id,
                seed=seed,
                trials=trials,
                write=write,
                on_step=progress.advance,
                schedule=schedule,
                counterfactual=counterfactual,
            )
        )
        for res in results:
            if res.error:
                say(f"locklab: {res.scenario} {res.case} failed: {res.error}")
    else:
        results = verify_here(
            chosen,
            profile,
            servers,
            progress,
            say,
            run_id=run_id,
            seed=seed,
            trials=trials,
            write=write,
            counterfactual=counterfactual,
        )
    for sc in chosen:  # claims that compare a scenario's cases
        if (across := judge_across(sc, profile, results)) is not None:
            results.append(across)
    results += not_run
    return _concluded(
        run_id, results, profile, catalogue, started, write=write, lanes=lanes, schedule=schedule
    )


def _concluded(
    run_id: str,
    results: list[ScenarioVerdicts],
    profile: Profile,
    catalogue: Sequence[Scenario],
    started: float,
    *,
    write: bool,
    lanes: int = 1,
    schedule: list[dict[str, Any]] | None = None,
    recorded: str = "",
) -> VerifyRun:
    from lab.verify.store import save_verdicts

    summary = summarize(results, results[0].profile if results else profile.name)
    wall = time.perf_counter() - started
    covered = coverage(results, catalogue)
    if run_id and write:
        save_verdicts(run_id, results, summary, covered, wall, lanes=lanes, schedule=schedule or [])
    return VerifyRun(run_id, results, summary, covered, wall, lanes, schedule or [], recorded)


def verify_here(
    chosen: Sequence[Scenario],
    profile: Profile,
    srv: Servers,
    progress: Progress,
    say: Say,
    *,
    run_id: str,
    seed: int,
    trials: int | None,
    write: bool,
    counterfactual: bool = False,
) -> list[ScenarioVerdicts]:
    """verify in the lab's own process (one lane): the loads one after another, then the
    explores, EXPLORES_AT_ONCE parts side by side (lab/verify/explore.py)."""
    from lab.verify.explore import verify_explores
    from lab.verify.judge import explore_claims
    from lab.verify.run import verify_plan, verify_scenario

    results: list[ScenarioVerdicts] = []
    runs = verify_plan(chosen, profile, trials)
    for i, (sc, case) in enumerate(runs):
        name = f"{sc.id} [{case}]" if case else sc.id
        progress.describe(f"verify {profile.name}: {name}")
        res = asyncio.run(
            verify_scenario(
                sc,
                profile,
                srv,
                run_id=run_id,
                seed=seed,
                trials=trials,
                write=write,
                on_step=progress.advance,
                case=case,
                spare=i + 1 < len(runs),
                counterfactual=counterfactual,
            )
        )
        if res.error:
            say(f"locklab: {name} failed: {res.error}")
        results.append(res)
    # claims about every interleaving (lab/pinned/), explores side by side
    explored = [sc for sc in chosen if explore_claims(sc, profile)]
    if explored:
        progress.describe(f"verify {profile.name}: explore {len(explored)} scenario(s)")
    for ex in asyncio.run(
        verify_explores(
            explored,
            profile,
            srv,
            run_id=run_id,
            write=write,
            on_step=progress.advance,
            counterfactual=counterfactual,
        )
    ):
        if ex.error:
            say(f"locklab: {ex.scenario} explore failed: {ex.error}")
        results.append(ex)
    return results
