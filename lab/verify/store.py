"""Recorded runs judged again, verdicts saved and loaded."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from lab.core.claims import Verdict
from lab.core.profiles import QUICK, Profile, claims_for, setup_of
from lab.core.results import read_record, results_root, run_folder, write_json
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.verify.explore import recorded_explore
from lab.verify.judge import (
    VERDICTS_FILE,
    ScenarioVerdicts,
    Summary,
    Trial,
    bare_verdict,
    evaluate,
    judge_across,
)

# --- recorded runs -----------------------------------------------------------------------


def recorded_trials(folder: Path) -> dict[tuple[str, str], list[Trial]]:
    """(scenario id, case) -> its trials, from a run folder (trial 1), its trial-<k>/
    folders and its case-<name>/ folders (each with their own trials)."""
    by: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    seeds: dict[tuple[str, str, int], int] = {}
    patterns = ("*.json", "trial-*/*.json", "case-*/*.json", "case-*/trial-*/*.json")
    for path in (p for pattern in patterns for p in sorted(folder.glob(pattern))):
        rec = read_record(path)
        if not isinstance(rec, dict) or "scenario" not in rec or "variant" not in rec:
            continue
        meta = rec.get("verify") or {}
        case_dir = next(
            (p.name for p in path.relative_to(folder).parents if p.name.startswith("case-")), ""
        )
        case = str(meta.get("case", case_dir.removeprefix("case-")))
        k = int(meta.get("trial", 1))
        by.setdefault((rec["scenario"], case), {}).setdefault(k, {})[rec["variant"]] = rec
        seeds[(rec["scenario"], case, k)] = int((rec.get("knobs") or {}).get("seed", 0))
    return {
        key: [Trial(seeds[(*key, k)], trials[k]) for k in sorted(trials)]
        for key, trials in sorted(by.items())
    }


def verify_recorded(
    ref: str,
    catalogue: Mapping[str, Scenario],
    profile: Profile | None = None,
    only: Sequence[str] = (),
    trials: int | None = None,
) -> list[ScenarioVerdicts]:
    """Judge the claims again on a recorded run, no server needed.

    The profile is the one the run was recorded with (verify records say), else `profile`,
    else quick; the trial count `trials`, else the `--trials` the run was made with, else
    each claim's own.
    """
    folder = run_folder(ref)
    found = recorded_trials(folder)
    if not found and not (folder / "explore").is_dir():
        raise LabError(f"run {ref!r} has no records")
    results = []
    for (sc_id, case), runs in found.items():
        if only and sc_id not in only:
            continue
        first = next(iter(runs[0].records.values()))
        meta = first.get("verify") or {}
        prof = meta.get("profile") or (profile or QUICK).name
        override = trials or meta.get("trials_override")
        scenario = catalogue.get(sc_id)
        if scenario is None:
            results.append(
                ScenarioVerdicts(
                    sc_id,
                    first.get("title", ""),
                    prof,
                    first.get("knobs", {}),
                    first.get("params", {}),
                    len(runs),
                    [],
                    case=case,
                    error=f"scenario {sc_id!r} is not in the catalogue",
                )
            )
            continue
        if case and case not in scenario.cases:
            continue  # a case the scenario no longer has
        claims, skipped = claims_for(scenario, Profile.of(prof), override, case)
        results.append(
            ScenarioVerdicts(
                scenario=sc_id,
                case=case,
                title=scenario.title,
                profile=prof,
                knobs=dict(first.get("knobs", {})),
                params=dict(first.get("params", {})),
                trials=len(runs),
                verdicts=evaluate(
                    claims,
                    runs,
                    tuple(scenario.variants),
                    setup_of(scenario, first.get("knobs", {}), first.get("params", {})),
                ),
                records=runs[0].records,
                skipped=[{**bare_verdict(c), "trials_asked": c.trials} for c in skipped],
            )
        )
    recorded_as = Profile.of(results[0].profile) if results else profile or QUICK
    results += recorded_explore(folder, catalogue, recorded_as, only)
    if only and not results:
        raise LabError(f"run {ref!r} has no records of {', '.join(only)}")
    for sc_id in dict.fromkeys(r.scenario for r in results):
        if (scenario := catalogue.get(sc_id)) is not None:
            across = judge_across(scenario, Profile.of(results[0].profile), results)
            if across is not None and across.verdicts:
                results.append(across)
    return results


def merge_cases(results: Sequence[ScenarioVerdicts]) -> list[ScenarioVerdicts]:
    """One entry per scenario: each case's verdicts folded into its scenario's own, the
    case named in the claim text (for views keyed by scenario, such as the report)."""
    merged: dict[str, ScenarioVerdicts] = {}
    for r in results:
        tagged: list[Verdict] = [
            {**v, "text": f"[{r.case}] {v['text']}"} if r.case else v for v in r.verdicts
        ]
        if r.scenario not in merged:
            merged[r.scenario] = replace(r, case="", verdicts=list(tagged))
        else:
            merged[r.scenario].verdicts.extend(tagged)
    return list(merged.values())


def save_verdicts(
    run_id: str,
    results: Sequence[ScenarioVerdicts],
    summary: Summary,
    coverage_line: str = "",
    wall_s: float | None = None,
    lanes: int = 1,
    schedule: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """Write the verdicts beside the run's records (atomically), for `locklab report`,
    with what verify printed at the end: the document coverage and the whole wall time."""
    path = results_root() / run_id / VERDICTS_FILE
    data = {
        "summary": summary.to_json(),
        "coverage": coverage_line,
        "wall_s": None if wall_s is None else round(wall_s, 1),
        "lanes": lanes,  # runs side by side (lab/verify/lanes.py); 1: one after another
        "schedule": list(schedule),  # per job on lanes: lane, start_s, end_s
        "scenarios": [r.to_json() for r in results],
    }
    return write_json(path, data)


def load_verdicts(folder: Path) -> list[ScenarioVerdicts] | None:
    """The verdicts a verify run saved in `folder`, or None (a plain run has none)."""
    path = folder / VERDICTS_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return [ScenarioVerdicts.from_json(s) for s in data["scenarios"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


# --- terminal ----------------------------------------------------------------------------


def trials_text(v: Mapping[str, Any]) -> str:
    if "trials_held" in v and len(v.get("trials", [])) > 1:
        return f"{v['trials_held']}/{len(v['trials'])} (need {v['trials_needed']})"
    asked = v.get("trials_asked", 1)
    return "1" if asked == 1 else f"?/{asked}"
