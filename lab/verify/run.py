"""Running a profile's scenarios for their claims: plans, variants, trials."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lab.core.claims import Claim, Record, Verdict
from lab.core.knobs import Knobs
from lab.core.profiles import Profile, claims_for, profile_settings, setup_of
from lab.core.results import write_record
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.load.plan import RunPlan
from lab.load.runner import run_plan
from lab.servers import Servers
from lab.verify import counterfactual as cf
from lab.verify.judge import (
    CASE_DIR,
    TRIAL_DIR,
    ScenarioVerdicts,
    Trial,
    across_claims,
    across_variants,
    bare_verdict,
    evaluate,
    explore_claims,
    trial_count,
    variants_for_trial,
)

# --- running -----------------------------------------------------------------------------


def verify_plan(
    scenarios: Sequence[Scenario], profile: Profile, trials: int | None = None
) -> list[tuple[Scenario, str]]:
    """(scenario, case) pairs verify runs: each scenario's own settings, then every case
    that has a claim to judge under this profile."""
    plan: list[tuple[Scenario, str]] = []
    for sc in scenarios:
        plan.append((sc, ""))
        plan += [
            (sc, c)
            for c in sc.cases
            if claims_for(sc, profile, trials, c)[0] or across_variants(sc, profile, c)
        ]
    return plan


def run_variants(
    scenario: Scenario,
    profile: Profile,
    claims: Sequence[Claim],
    k: int,
    case: str,
    counterfactual: bool = False,
) -> list[str]:
    """The variants trial k of (scenario, case) runs: its claims' and cross-case claims',
    and with `counterfactual` the variants their counterfactuals read (code mutants only
    then, and only those a claim names)."""
    need = set(variants_for_trial(scenario, claims, k, case))
    if k == 1:
        need |= across_variants(scenario, profile, case)
    if counterfactual:
        names = tuple(scenario.variants)
        need |= {v for c in claims if c.trials >= k for v in cf.swapped_variants(c, names)}
        if k == 1:
            need |= {
                v.split("@")[0]
                for c in across_claims(scenario, profile)
                for v in cf.swap_names(c, names)
                if v.endswith(f"@{case}")
            }
    return [v for v in (*scenario.variants, *scenario.mutants) if v in need]


def variant_runs(
    scenario: Scenario,
    profile: Profile,
    trials: int | None,
    case: str,
    counterfactual: bool = False,
) -> int:
    """How many variant runs verify makes for one (scenario, case), every trial counted."""
    claims, _ = claims_for(scenario, profile, trials, case)
    return sum(
        len(run_variants(scenario, profile, claims, k, case, counterfactual))
        for k in range(1, trial_count(claims) + 1)
    )


def steps(
    scenario: Scenario, profile: Profile, trials: int | None = None, counterfactual: bool = False
) -> int:
    """How many variant runs verify makes for `scenario`, cases included (progress bar)."""
    total = 1 if explore_claims(scenario, profile) else 0
    for sc, case in verify_plan([scenario], profile, trials):
        total += variant_runs(sc, profile, trials, case, counterfactual)
    return total


async def verify_scenario(
    scenario: Scenario,
    profile: Profile,
    servers: Servers,
    *,
    run_id: str,
    seed: int = 1,
    trials: int | None = None,
    write: bool = True,
    on_step: Callable[[str], None] | None = None,
    case: str = "",
    spare: bool = False,
    counterfactual: bool = False,
) -> ScenarioVerdicts:
    """Run the trials `scenario`'s claims need under `profile`, then judge them (with
    `counterfactual`, also the variants the claims' counterfactuals read).

    `spare`: another run follows; its first database is made during this one's last
    variant (lab.load.plan.RunPlan.spare_after). Trials after the first take one too.

    A scenario that fails to run (an undeclared outcome, a crash in its code) becomes an
    error on its claims, so one broken scenario does not hide the rest of the catalogue;
    bad input and unreachable servers (LabError) stop verify.
    """
    started = time.perf_counter()
    knobs, params = profile_settings(scenario, profile, seed, case)
    claims, skipped = claims_for(scenario, profile, trials, case)
    result = _unjudged(scenario, profile, case, knobs, params, trial_count(claims), skipped)
    runs = _Trials(
        scenario,
        profile,
        servers,
        claims,
        knobs,
        params,
        run_id=f"{run_id}/{CASE_DIR.format(case=case)}" if case else run_id,
        seed=seed,
        trials_override=trials,
        write=write,
        on_step=on_step,
        case=case,
        spare=spare,
        counterfactual=counterfactual,
    )
    done: list[Trial] = []
    try:
        for k in range(1, runs.count + 1):
            done.append(await runs.run(k))
            if k == 1:
                result.records = done[0].records
    except LabError:
        raise
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        result.verdicts = _run_failed(claims, result.error)
    else:
        setup = setup_of(scenario, result.knobs, params)
        result.verdicts = evaluate(claims, done, tuple(scenario.variants), setup)
    result.wall_s = time.perf_counter() - started
    return result


def _unjudged(
    scenario: Scenario,
    profile: Profile,
    case: str,
    knobs: Knobs,
    params: dict[str, Any],
    trials: int,
    skipped: Sequence[Claim],
) -> ScenarioVerdicts:
    """What verify will say of (scenario, case) before its trials run: its settings, and
    the claims of other profiles or trial counts it skips."""
    return ScenarioVerdicts(
        scenario=scenario.id,
        case=case,
        title=scenario.title,
        profile=profile.name,
        knobs=knobs.to_json(),
        params=params,
        trials=trials,
        verdicts=[],
        skipped=[{**bare_verdict(c), "trials_asked": c.trials} for c in skipped],
    )


@dataclass(frozen=True)
class _Trials:
    """The trials of one (scenario, case) under a profile: each one's variants, seed and
    run folder, and what its records say of the verify that ran them."""

    scenario: Scenario
    profile: Profile
    servers: Servers
    claims: Sequence[Claim]
    knobs: Knobs
    params: dict[str, Any]
    run_id: str  # the case's folder of the verify run
    seed: int  # trial k runs with seed + k - 1
    trials_override: int | None  # --trials, kept in every record
    write: bool
    on_step: Callable[[str], None] | None
    case: str
    spare: bool
    counterfactual: bool

    @property
    def count(self) -> int:
        """How many trials the claims need."""
        return trial_count(self.claims)

    async def run(self, k: int) -> Trial:
        """Run trial k's variants, mark (and with `write`, write) their records."""
        records = await run_plan(self.plan(k), self.servers, self.variant_done(k))
        seed = self.seed + k - 1
        for rec in records:
            rec["verify"] = {
                "profile": self.profile.name,
                "case": self.case,
                "trial": k,
                "trials": self.count,
                "trials_override": self.trials_override,
                "seed": seed,
            }
            if self.write:
                write_record(rec)
        return Trial(seed, {r["variant"]: r for r in records})

    def plan(self, k: int) -> RunPlan:
        """Trial k's run: the variants it needs, its seed, its folder (trial-<k> past the
        first), a spare database for the run that follows it."""
        variants = run_variants(
            self.scenario, self.profile, self.claims, k, self.case, self.counterfactual
        )
        return RunPlan(
            self.scenario,
            variants,
            replace(self.knobs, seed=self.seed + k - 1),
            self.params,
            self.run_id if k == 1 else f"{self.run_id}/{TRIAL_DIR.format(k=k)}",
            write=False,
            case=self.case,
            spare_after=self.spare or k < self.count,
        )

    def variant_done(self, k: int) -> Callable[[Record], None]:
        """The progress line of each variant trial k finishes."""
        k_max = self.count

        def step(rec: Record) -> None:
            if self.on_step is not None:
                trial = f" (trial {k}/{k_max})" if k_max > 1 else ""
                self.on_step(f"{self.scenario.id}: {rec['variant']}{trial} done")

        return step


def _run_failed(claims: Sequence[Claim], error: str) -> list[Verdict]:
    """Every claim not held, judged on a run that failed with `error`."""
    return [
        {
            **bare_verdict(c),
            "held": False,
            "judged": True,
            "status": "not held",
            "trials_asked": c.trials,
            "measured": f"run failed: {error}",
        }
        for c in claims
    ]
