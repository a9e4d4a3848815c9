"""Running a profile's scenarios for their claims: plans, variants, trials."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from lab.core.claims import Claim, Record
from lab.core.profiles import claims_for, profile_settings, setup_of
from lab.core.results import write_record
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.load.runner import RunPlan, run_plan
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
    scenarios: Sequence[Scenario], profile: str, trials: int | None = None
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
    profile: str,
    claims: Sequence[Claim],
    k: int,
    case: str,
    counterfactual: bool = False,
) -> list[str]:
    """The variants trial k of (scenario, case) runs: its claims' and cross-case claims',
    and with `counterfactual` the variants their counterfactuals read."""
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
    return [v for v in scenario.variants if v in need]


def variant_runs(
    scenario: Scenario, profile: str, trials: int | None, case: str, counterfactual: bool = False
) -> int:
    """How many variant runs verify makes for one (scenario, case), every trial counted."""
    claims, _ = claims_for(scenario, profile, trials, case)
    return sum(
        len(run_variants(scenario, profile, claims, k, case, counterfactual))
        for k in range(1, trial_count(claims) + 1)
    )


def steps(
    scenario: Scenario, profile: str, trials: int | None = None, counterfactual: bool = False
) -> int:
    """How many variant runs verify makes for `scenario`, cases included (progress bar)."""
    total = 1 if explore_claims(scenario, profile) else 0
    for sc, case in verify_plan([scenario], profile, trials):
        total += variant_runs(sc, profile, trials, case, counterfactual)
    return total


async def verify_scenario(
    scenario: Scenario,
    profile: str,
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
    variant (lab.load.runner.RunPlan.spare_after). Trials after the first take one too.

    A scenario that fails to run (an undeclared outcome, a crash in its code) becomes an
    error on its claims, so one broken scenario does not hide the rest of the catalogue;
    bad input and unreachable servers (LabError) stop verify.
    """
    started = time.perf_counter()
    knobs, params = profile_settings(scenario, profile, seed, case)
    claims, skipped = claims_for(scenario, profile, trials, case)
    k_max = trial_count(claims)
    if case:
        run_id = f"{run_id}/{CASE_DIR.format(case=case)}"
    done: list[Trial] = []
    result = ScenarioVerdicts(
        scenario=scenario.id,
        case=case,
        title=scenario.title,
        profile=profile,
        knobs=knobs.to_json(),
        params=params,
        trials=k_max,
        verdicts=[],
        skipped=[{**bare_verdict(c), "trials_asked": c.trials} for c in skipped],
    )
    try:
        for k in range(1, k_max + 1):
            variants = run_variants(scenario, profile, claims, k, case, counterfactual)
            trial_knobs = replace(knobs, seed=seed + k - 1)
            rid = run_id if k == 1 else f"{run_id}/{TRIAL_DIR.format(k=k)}"
            plan = RunPlan(
                scenario,
                variants,
                trial_knobs,
                params,
                rid,
                write=False,
                case=case,
                spare_after=spare or k < k_max,
            )

            def step(rec: Record, k: int = k) -> None:
                if on_step is not None:
                    trial = f" (trial {k}/{k_max})" if k_max > 1 else ""
                    on_step(f"{scenario.id}: {rec['variant']}{trial} done")

            records = await run_plan(plan, servers, step)
            for rec in records:
                rec["verify"] = {
                    "profile": profile,
                    "case": case,
                    "trial": k,
                    "trials": k_max,
                    "trials_override": trials,
                    "seed": trial_knobs.seed,
                }
                if write:
                    write_record(rec)
            done.append(Trial(trial_knobs.seed, {r["variant"]: r for r in records}))
            if k == 1:
                result.records = done[0].records
    except LabError:
        raise
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        result.verdicts = [
            {
                **bare_verdict(c),
                "held": False,
                "judged": True,
                "status": "not held",
                "trials_asked": c.trials,
                "measured": f"run failed: {result.error}",
            }
            for c in claims
        ]
        result.wall_s = time.perf_counter() - started
        return result
    result.verdicts = evaluate(
        claims, done, tuple(scenario.variants), setup_of(scenario, result.knobs, params)
    )
    result.wall_s = time.perf_counter() - started
    return result
