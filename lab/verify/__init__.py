"""`locklab verify`: re-run scenarios under a profile and judge every documented claim.

Profiles: ``published`` runs each scenario with its defaults (the documents' sizes and
settings); ``quick`` applies the scenario's ``quick=`` overrides (fewer actors, a shorter
deadlock_timeout) where the claim is about shape. A claim that depends on chance carries
``trials``: the scenario runs that many times, seeds seed..seed+k-1, and the verdict says
"held in 4/5 trials". Judging is pure: it works on records, fresh or recorded.

Records of trial k > 1 are written under ``results/<run-id>/trial-<k>/``; the verdicts of
a verify run under ``results/<run-id>/verify/verdicts.json``.

The package: ``command`` (`locklab verify` as one call, returning a typed `VerifyRun`),
``judge`` (verdicts and judging, pure), ``run`` (a profile's scenarios run for their
claims: plans, variants, trials), ``explore`` (claims about interleavings: explores split
into parts, judged as a whole), ``store`` (recorded runs judged again, verdicts saved and
loaded), ``counterfactual`` (each claim judged again on records it does not speak of: can
it fail?), ``jobs`` (the plan as jobs, and which may run beside the ones running),
``lanes`` and ``lane_child`` (lane processes running those jobs side by side: the lab's
side and the lane's), ``matrix`` (`verify --matrix`: the claims on every server version
this machine has). The public names of ``judge``, ``run``, ``explore`` and ``store`` are
re-exported here.
"""

from __future__ import annotations

from lab.verify.explore import (
    EXPLORE_CASE,
    EXPLORES_AT_ONCE,
    PART_INTERLEAVINGS,
    explore_failed,
    explore_part,
    explore_parts,
    explore_plan,
    judge_explore,
    recorded_explore,
    verify_explore,
    verify_explores,
)
from lab.verify.judge import (
    CASE_DIR,
    DOCUMENT_CLAIMS,
    JUDGED,
    TRIAL_DIR,
    VERDICTS_FILE,
    ScenarioVerdicts,
    Summary,
    Trial,
    across_claims,
    across_variants,
    bare_verdict,
    coverage,
    evaluate,
    explore_claims,
    id_key,
    is_gap,
    judge_across,
    status_of,
    summarize,
    trial_count,
    variants_for_trial,
)
from lab.verify.run import run_variants, steps, variant_runs, verify_plan, verify_scenario
from lab.verify.store import (
    load_verdicts,
    merge_cases,
    recorded_trials,
    save_verdicts,
    trials_text,
    verify_recorded,
)

__all__ = [
    "CASE_DIR",
    "DOCUMENT_CLAIMS",
    "EXPLORES_AT_ONCE",
    "EXPLORE_CASE",
    "JUDGED",
    "PART_INTERLEAVINGS",
    "TRIAL_DIR",
    "VERDICTS_FILE",
    "ScenarioVerdicts",
    "Summary",
    "Trial",
    "across_claims",
    "across_variants",
    "bare_verdict",
    "coverage",
    "evaluate",
    "explore_claims",
    "explore_failed",
    "explore_part",
    "explore_parts",
    "explore_plan",
    "id_key",
    "is_gap",
    "judge_across",
    "judge_explore",
    "load_verdicts",
    "merge_cases",
    "recorded_explore",
    "recorded_trials",
    "run_variants",
    "save_verdicts",
    "status_of",
    "steps",
    "summarize",
    "trial_count",
    "trials_text",
    "variant_runs",
    "variants_for_trial",
    "verify_explore",
    "verify_explores",
    "verify_plan",
    "verify_recorded",
    "verify_scenario",
]
