"""`locklab verify`: re-run scenarios under a profile and judge every documented claim.

Profiles: ``published`` runs each scenario with its defaults (the documents' sizes and
settings); ``quick`` applies the scenario's ``quick=`` overrides (fewer actors, a shorter
deadlock_timeout) where the claim is about shape. A claim that depends on chance carries
``trials``: the scenario runs that many times, seeds seed..seed+k-1, and the verdict says
"held in 4/5 trials". Judging is pure: it works on records, fresh or recorded.

Records of trial k > 1 are written under ``results/<run-id>/trial-<k>/``; the verdicts of
a verify run under ``results/<run-id>/verify/verdicts.json``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from lab import counterfactual as cf
from lab.catalogue import document_counts
from lab.claims import NOT_REPRODUCED, Claim, Record, Verdict, judge_trials
from lab.errors import LabError
from lab.profiles import check_profile, claims_for, profile_settings, setup_of
from lab.results import read_record, results_root, run_folder, write_json, write_record
from lab.runner import RunPlan, run_plan
from lab.scenario import Scenario
from lab.servers import Servers

# How many claims each source document makes (every id is listed in lab/catalogue.py).
DOCUMENT_CLAIMS = document_counts()
TRIAL_DIR = "trial-{k}"
CASE_DIR = "case-{case}"
VERDICTS_FILE = Path("verify") / "verdicts.json"


@dataclass(frozen=True)
class Trial:
    """One run of a scenario: its seed and one record per variant it ran."""

    seed: int
    records: Mapping[str, Record]


@dataclass
class ScenarioVerdicts:
    """What verify found for one scenario under one profile."""

    scenario: str
    title: str
    profile: str
    knobs: dict[str, Any]
    params: dict[str, Any]
    trials: int
    verdicts: list[Verdict]
    skipped: list[dict[str, Any]] = field(default_factory=list)  # claims of other profiles
    error: str | None = None
    wall_s: float = 0.0
    case: str = ""  # "" = the profile's own settings, else one of the scenario's cases
    # trial 1's records by variant, for claims that compare cases (not serialised)
    records: Mapping[str, Record] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "case": self.case,
            "title": self.title,
            "profile": self.profile,
            "knobs": self.knobs,
            "params": self.params,
            "trials": self.trials,
            "verdicts": self.verdicts,
            "skipped": self.skipped,
            "error": self.error,
            "wall_s": round(self.wall_s, 2),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScenarioVerdicts:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Summary:
    held: int
    not_held: int
    not_judged: int
    not_exercised: int
    skipped: int
    errors: int
    scenarios: int
    profile: str
    gaps: int = 0  # held claims on a published number the lab does not reproduce: not in held
    fitted: int = 0  # held on a number a knob was fitted to: not in held
    cannot_fail: int = 0  # held on their counterfactual too (verify --counterfactual)

    @property
    def ok(self) -> bool:
        return self.not_held == 0 and self.not_judged == 0 and self.errors == 0

    def line(self) -> str:
        """`12 claims held, 0 not held`, then what else a reader must know."""
        text = f"{self.held} claims held, {self.not_held} not held"
        extra = []
        if self.fitted:
            extra.append(f"{self.fitted} FITTED (a knob was fitted to the number they check)")
        if self.gaps:
            extra.append(f"{self.gaps} published number(s) NOT REPRODUCED, only their gap held")
        if self.cannot_fail:
            extra.append(f"{self.cannot_fail} held on their counterfactual too: cannot fail")
        if self.not_judged:
            extra.append(f"{self.not_judged} not judged")
        if self.not_exercised:
            extra.append(f"{self.not_exercised} not exercised by these settings")
        if self.errors:
            extra.append(f"{self.errors} scenario run(s) failed")
        if self.skipped:
            extra.append(f"{self.skipped} belong to another profile")
        if extra:
            text += " (" + "; ".join(extra) + ")"
        s = "s" if self.scenarios != 1 else ""
        return f"{text} — profile {self.profile}, {self.scenarios} scenario{s}"

    def to_json(self) -> dict[str, Any]:
        return {
            "held": self.held,
            "not_held": self.not_held,
            "not_judged": self.not_judged,
            "not_exercised": self.not_exercised,
            "skipped": self.skipped,
            "errors": self.errors,
            "scenarios": self.scenarios,
            "profile": self.profile,
            "gaps": self.gaps,
            "fitted": self.fitted,
            "cannot_fail": self.cannot_fail,
            "line": self.line(),
        }


# --- profiles and trials (pure) -----------------------------------------------------------


def across_claims(scenario: Scenario, profile: str) -> list[Claim]:
    """Claims that compare the scenario's cases, judged once all of them have run."""
    return [c for c in scenario.claims if c.across and profile in c.profiles]


def across_variants(scenario: Scenario, profile: str, case: str) -> set[str]:
    """Variants a case must run for the claims that compare it with other cases."""
    keys = (v.split("@", 1) for c in across_claims(scenario, profile) for v in c.variants)
    return {variant for variant, of_case in keys if of_case == case}


def judge_across(
    scenario: Scenario, profile: str, results: Sequence[ScenarioVerdicts]
) -> ScenarioVerdicts | None:
    """The verdicts of claims comparing cases, from the runs of those cases (`records`)."""
    claims = across_claims(scenario, profile)
    if not claims:
        return None
    combined = {
        f"{variant}@{r.case}": rec
        for r in results
        if r.scenario == scenario.id
        for variant, rec in r.records.items()
    }
    cases = sorted({c for claim in claims for c in claim.cases})
    setup = "scaled: compares the cases " + " vs ".join(c or "defaults" for c in cases)
    return ScenarioVerdicts(
        scenario=scenario.id,
        title=scenario.title,
        profile=profile,
        knobs={},
        params={},
        trials=1,
        verdicts=evaluate(claims, [Trial(0, combined)], tuple(scenario.variants), setup),
        case=" vs ".join(c or "profile" for c in cases),
    )


def trial_count(claims: Iterable[Claim]) -> int:
    return max((c.trials for c in claims), default=1)


def variants_for_trial(
    scenario: Scenario, claims: Sequence[Claim], k: int, case: str = ""
) -> list[str]:
    """Trial 1 of the profile's own settings runs every variant (the record of a whole
    run); a case, and later trials, run only the variants their claims still need."""
    if k == 1 and not case:
        return list(scenario.variants)
    need = {v for c in claims if c.trials >= k for v in c.variants}
    return [v for v in scenario.variants if v in need]


def evaluate(
    claims: Sequence[Claim],
    trials: Sequence[Trial],
    variants: Sequence[str] = (),
    setup: str = "",
) -> list[Verdict]:
    """Every claim's verdict over the trials it asks for (pure: records in, verdicts out).

    Each verdict has a `status`: "held", "not held", "fitted" and "not reproduced" (held,
    but not counted so), "not judged" (a variant's record is missing, or fewer trials than
    the claim asks for) or "not exercised" (the check says this run's settings do not
    exercise it, e.g. a failure mode left off). Nothing is silently dropped. Given the
    scenario's `variants`, each judged verdict also gets its `counterfactual`
    (lab/counterfactual.py); `setup` says whose settings the run had.
    """
    out: list[Verdict] = []
    for c in claims:
        runs = [t for t in trials[: c.trials] if all(v in t.records for v in c.variants)]
        verdict: Verdict | None = judge_trials(c, [t.records for t in runs], [t.seed for t in runs])
        exercised = len(verdict["trials"]) if verdict is not None else 0
        if not runs:
            missing = sorted({v for t in trials for v in c.variants if v not in t.records})
            why = f"no record of {', '.join(missing) or 'any variant'}"
            verdict = {**_bare(c), "held": False, "status": "not judged", "measured": why}
        elif verdict is None:
            why = "this run's settings do not exercise it"
            verdict = {**_bare(c), "held": False, "status": "not exercised", "measured": why}
        elif exercised < c.trials:
            why = f"asks for {c.trials} trials, {exercised} recorded; {verdict['measured']}"
            verdict = {**verdict, "held": False, "status": "not judged", "measured": why}
        elif verdict.get("not_judged"):  # the check said the run could not judge it
            verdict = {**verdict, "held": False, "status": "not judged"}
        verdict["judged"] = verdict["status"] in JUDGED
        verdict["trials_asked"] = c.trials
        verdict["setup"] = c.setup or setup or "document"
        if variants and verdict["judged"]:
            said, there = cf.judge(c, [t.records for t in runs], variants)
            verdict["counterfactual"] = said
            if there:
                verdict["counterfactual_measured"] = there
        out.append(verdict)
    return out


JUDGED = ("held", "not held", "fitted", "not reproduced")


def status_of(v: Mapping[str, Any]) -> str:
    """A verdict's status; records written before statuses existed have only `held`."""
    return str(v.get("status") or ("held" if v.get("held") else "not held"))


def is_gap(v: Mapping[str, Any]) -> bool:
    """A claim that a published number is not reproduced (lab.seconds.wall_not_reproduced)."""
    return bool(v.get("gap")) or str(v.get("text", "")).startswith(NOT_REPRODUCED)


def _bare(c: Claim) -> Verdict:
    return c.bare()


def summarize(results: Sequence[ScenarioVerdicts], profile: str) -> Summary:
    verdicts = [v for r in results for v in r.verdicts]
    # records written before "not reproduced" was a status said "held" with a gap's text
    gaps = sum(1 for v in verdicts if status_of(v) in ("held", "not reproduced") and is_gap(v))
    return Summary(
        held=sum(1 for v in verdicts if status_of(v) == "held" and not is_gap(v)),
        fitted=sum(1 for v in verdicts if status_of(v) == "fitted"),
        cannot_fail=sum(1 for v in verdicts if v.get("counterfactual") == "held"),
        gaps=gaps,
        not_held=sum(1 for v in verdicts if status_of(v) == "not held"),
        not_judged=sum(1 for v in verdicts if status_of(v) == "not judged"),
        not_exercised=sum(1 for v in verdicts if status_of(v) == "not exercised"),
        skipped=sum(len(r.skipped) for r in results),
        errors=sum(1 for r in results if r.error),
        scenarios=len({r.scenario for r in results}),  # not its cases and explores
        profile=profile,
    )


def id_key(cid: str) -> tuple[str, int]:
    m = re.fullmatch(r"([A-Z]+)-(\d+)", cid)
    return (m[1], int(m[2])) if m else (cid, 0)


def coverage(results: Sequence[ScenarioVerdicts], catalogue: Sequence[Scenario]) -> str:
    """Which document claims this verify judged (held or not held), how many of those at
    the document's own settings, and which no scenario reaches yet. A scaled run (fewer
    actors, a shorter timeout) judges an id's shape, not its sentence's numbers."""
    judged = [v for r in results for v in r.verdicts if status_of(v) in ("held", "not held")]
    checked = {v["id"] for v in judged}
    at_doc = {v["id"] for v in judged if v.get("setup", "document") == "document"}
    reached = {c.id for s in catalogue for c in s.claims}
    parts, missing = [], []
    for doc, count in DOCUMENT_CLAIMS.items():
        ids = [f"{doc}-{i}" for i in range(1, count + 1)]
        own = sum(1 for i in ids if i in at_doc)
        parts.append(f"{doc} {sum(1 for i in ids if i in checked)}/{count} ({own} at its settings)")
        missing += [i for i in ids if i not in reached]
    line = "document claims judged: " + ", ".join(parts)
    if missing:
        line += "; not reached by any scenario yet: " + _ranges(missing)
    return line


def _ranges(ids: Sequence[str]) -> str:
    """DL-2, DL-5..21, LC-1..25: consecutive ids of one document folded into a range."""
    out: list[str] = []
    run: list[tuple[str, int]] = []

    def flush() -> None:
        if run:
            doc, a = run[0]
            b = run[-1][1]
            out.append(f"{doc}-{a}" if a == b else f"{doc}-{a}..{b}")
            run.clear()

    for doc, n in sorted((id_key(i) for i in ids), key=lambda x: (x[0], x[1])):
        if run and (run[-1][0] != doc or run[-1][1] + 1 != n):
            flush()
        run.append((doc, n))
    flush()
    return ", ".join(out)


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
    variant (lab.runner.RunPlan.spare_after). Trials after the first take one too.

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
        skipped=[{**_bare(c), "trials_asked": c.trials} for c in skipped],
    )
    try:
        for k in range(1, k_max + 1):
            variants = run_variants(scenario, profile, claims, k, case, counterfactual)
            trial_knobs = replace(knobs, seed=seed + k - 1)
            rid = run_id if k == 1 else f"{run_id}/{TRIAL_DIR.format(k=k)}"
            plan = RunPlan(
                scenario, variants, trial_knobs, params, rid, write=False, case=case,
                spare_after=spare or k < k_max,
            )  # fmt: skip

            def step(rec: dict[str, Any], k: int = k) -> None:
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
            done.append(Trial(trial_knobs.seed, {r["variant"]: cast(Record, r) for r in records}))
            if k == 1:
                result.records = done[0].records
    except LabError:
        raise
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        result.verdicts = [
            {**_bare(c), "held": False, "judged": True, "status": "not held",
             "trials_asked": c.trials, "measured": f"run failed: {result.error}"}
            for c in claims
        ]  # fmt: skip
        result.wall_s = time.perf_counter() - started
        return result
    result.verdicts = evaluate(
        claims, done, tuple(scenario.variants), setup_of(scenario, result.knobs, params)
    )
    result.wall_s = time.perf_counter() - started
    return result


# --- claims about interleavings -----------------------------------------------------------

EXPLORE_CASE = "explore"
# Explores verify runs side by side (verify_explores): most of an explore's time is spent
# waiting for the server (a deadlock_timeout, a lock_timeout, a holder's pg_sleep). Every
# quick explore of the catalogue on this 2-core machine, idle: 39.7, 41.4 s at 2 parts at
# once; 32.5, 34.9, 38.7 s at 3; 34.3, 34.0 s at 4.
EXPLORES_AT_ONCE = 3


def explore_claims(scenario: Scenario, profile: str) -> list[Claim]:
    """Claims judged on every interleaving of the scenario's pinned sessions."""
    return [c for c in scenario.claims if c.explore and profile in c.profiles]


def _explore_verdicts(
    scenario: Scenario, profile: str, claims: Sequence[Claim], record: Mapping[str, Any]
) -> ScenarioVerdicts:
    return ScenarioVerdicts(
        scenario=scenario.id,
        title=scenario.title,
        profile=profile,
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
    from lab.sequencer import count_interleavings

    steps = pinned_of(scenario).steps
    parts: list[list[str]] = [[]]
    size = 0
    for v, levels in plan.items():
        if size >= PART_INTERLEAVINGS:
            parts.append([])
            size = 0
        parts[-1].append(v)
        size += count_interleavings(steps[v]) * max(1, len(levels))
    return parts


def explore_plan(
    scenario: Scenario, profile: str, counterfactual: bool = False
) -> tuple[list[Claim], dict[str, list[str]]]:
    """The scenario's explore claims under `profile` and what they need explored: each
    variant they name (with `counterfactual`, also each variant their counterfactuals
    read), at the isolation levels they name it at."""
    from lab.steps import ISOLATION_LEVELS

    claims = explore_claims(scenario, profile)
    names = tuple(scenario.variants)

    def reads(c: Claim) -> set[str]:
        return set(c.variants) | (cf.swapped_variants(c, names) if counterfactual else set())

    plan = {
        v: [lv for lv in ISOLATION_LEVELS if any(lv in c.levels for c in claims if v in reads(c))]
        for v in scenario.variants
        if any(v in reads(c) for c in claims)
    }
    return claims, plan


async def explore_part(
    scenario: Scenario,
    profile: str,
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
        scenario, servers, {v: plan[v] for v in variants}, run_id=run_id,
        deadlock_ms=knobs.deadlock_timeout_ms, lane=f"_{part}",
    )  # fmt: skip


def explore_failed(scenario: Scenario, profile: str, error: str) -> ScenarioVerdicts:
    """The explore claims of a scenario whose explore failed: not held, saying why."""
    result = _explore_verdicts(scenario, profile, [], {})
    result.error = error
    result.verdicts = [
        {**_bare(c), "held": False, "judged": True, "status": "not held",
         "trials_asked": 1, "measured": f"explore failed: {error}"}
        for c in explore_claims(scenario, profile)
    ]  # fmt: skip
    return result


def judge_explore(
    scenario: Scenario,
    profile: str,
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
    profile: str,
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
    profile: str,
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
    in the lab's own process (one lane); lab/lanes.py runs loads side by side too."""
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
    folder: Path, catalogue: Mapping[str, Scenario], profile: str, only: Sequence[str] = ()
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
    profile: str | None = None,
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
        prof = meta.get("profile") or profile or "quick"
        override = trials or meta.get("trials_override")
        scenario = catalogue.get(sc_id)
        if scenario is None:
            results.append(
                ScenarioVerdicts(sc_id, first.get("title", ""), prof, first.get("knobs", {}),
                                 first.get("params", {}), len(runs), [], case=case,
                                 error=f"scenario {sc_id!r} is not in the catalogue")
            )  # fmt: skip
            continue
        if case and case not in scenario.cases:
            continue  # a case the scenario no longer has
        claims, skipped = claims_for(scenario, check_profile(prof), override, case)
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
                skipped=[{**_bare(c), "trials_asked": c.trials} for c in skipped],
            )
        )
    results += recorded_explore(
        folder, catalogue, results[0].profile if results else profile or "quick", only
    )
    if only and not results:
        raise LabError(f"run {ref!r} has no records of {', '.join(only)}")
    for sc_id in dict.fromkeys(r.scenario for r in results):
        if (scenario := catalogue.get(sc_id)) is not None:
            across = judge_across(scenario, results[0].profile, results)
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
        "lanes": lanes,  # runs side by side (lab/lanes.py); 1: one after another
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
