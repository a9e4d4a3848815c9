"""Verdicts and judging, pure: trials, profiles, statuses, the summary, coverage."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.core.catalogue import document_counts
from lab.core.claims import KINDS, NOT_REPRODUCED, Claim, Record, Verdict, judge_trials
from lab.core.profiles import Profile
from lab.core.scenario import Scenario
from lab.verify import counterfactual as cf

# How many claims each source document makes (every id is listed in lab/core/catalogue.py).
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
    missing: str = ""  # not run: a part it needs is not on this machine (why, how to get it)
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
            "missing": self.missing,
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
    gaps: int = 0  # published numbers the lab does not reproduce (NOT REPRODUCED): not in held
    fitted: int = 0  # held on a number a knob was fitted to: not in held
    cannot_fail: int = 0  # held on their counterfactual too (verify --counterfactual)
    by_chance: int = 0  # failed their counterfactual in some trials only ("held in k of n")
    # not judged because this machine lacks a part their scenario needs (PgBouncer): as if
    # their scenarios had not been asked for, so not against `ok`; `missing` says which
    missing: int = 0
    missing_why: str = ""
    # verify --counterfactual: judged verdicts per counterfactual kind (KINDS), and how
    # many have none outside a declared gap (NOT REPRODUCED): those fail --counterfactual
    kinds: dict[str, int] = field(default_factory=dict)
    ungrounded: int = 0
    # a plain verify: counterfactuals whose records only verify --counterfactual makes
    # (another variant, a mutant): not counted as ungrounded there, a failure with it
    unrun: int = 0

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
            extra.append(f"{self.gaps} published number(s) NOT REPRODUCED")
        if self.cannot_fail:
            extra.append(f"{self.cannot_fail} held on their counterfactual too: cannot fail")
        if self.by_chance:
            extra.append(f"{self.by_chance} failed their counterfactual in some trials only")
        if self.ungrounded:
            extra.append(f"{self.ungrounded} with no counterfactual outside a declared gap")
        if self.not_judged:
            extra.append(f"{self.not_judged} not judged")
        if self.missing:
            extra.append(f"{self.missing} NOT JUDGED ({self.missing_why})")
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
            "counterfactual_kinds": self.kinds,
            "ungrounded": self.ungrounded,
            "unrun": self.unrun,
            "missing": self.missing,
            "missing_why": self.missing_why,
            "line": self.line(),
        }


# --- profiles and trials (pure) -----------------------------------------------------------


def across_claims(scenario: Scenario, profile: Profile) -> list[Claim]:
    """Claims that compare the scenario's cases, judged once all of them have run."""
    return [c for c in scenario.claims if c.across and profile.judges(c)]


def across_variants(scenario: Scenario, profile: Profile, case: str) -> set[str]:
    """Variants a case must run for the claims that compare it with other cases."""
    keys = (v.split("@", 1) for c in across_claims(scenario, profile) for v in c.variants)
    return {variant for variant, of_case in keys if of_case == case}


def judge_across(
    scenario: Scenario, profile: Profile, results: Sequence[ScenarioVerdicts]
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
        profile=profile.name,
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
    but not counted so), "not judged" (a variant's record is missing, fewer trials than
    the claim asks for, or the check found nothing to judge: verify runs each claim at its
    own settings, so an effect that did not happen there is no pass, and it counts against
    verify's exit). Nothing is silently dropped. Given the
    scenario's `variants`, each judged verdict also gets its `counterfactual`
    (lab/verify/counterfactual.py); `setup` says whose settings the run had.
    """
    out: list[Verdict] = []
    for c in claims:
        runs = [t for t in trials[: c.trials] if all(v in t.records for v in c.variants)]
        verdict: Verdict | None = judge_trials(c, [t.records for t in runs], [t.seed for t in runs])
        exercised = len(verdict["trials"]) if verdict is not None else 0
        if not runs:
            missing = sorted({v for t in trials for v in c.variants if v not in t.records})
            why = f"no record of {', '.join(missing) or 'any variant'}"
            verdict = {**bare_verdict(c), "held": False, "status": "not judged", "measured": why}
        elif verdict is None:
            why = (
                "at its own settings the run did not exercise it: the check found nothing to judge"
            )
            verdict = {**bare_verdict(c), "held": False, "status": "not judged", "measured": why}
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
            verdict["counterfactual_kind"] = cf.kind(c, said)
            if there:
                verdict["counterfactual_measured"] = there
        out.append(verdict)
    return out


JUDGED = ("held", "not held", "fitted", "not reproduced")


def status_of(v: Mapping[str, Any]) -> str:
    """A verdict's status; records written before statuses existed have only `held`."""
    return str(v.get("status") or ("held" if v.get("held") else "not held"))


def kind_counts(verdicts: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many verdicts have each counterfactual kind (every kind named, in KINDS' order);
    {} when none was judged on a counterfactual."""
    said = [str(v["counterfactual_kind"]) for v in verdicts if v.get("counterfactual_kind")]
    return {k: said.count(k) for k in KINDS} if said else {}


def kinds_line(kinds: Mapping[str, int]) -> str:
    """`counterfactuals by kind: run 250, level 4, ...` (verify --counterfactual's last line)."""
    return "counterfactuals by kind: " + ", ".join(f"{k} {n}" for k, n in kinds.items())


def is_gap(v: Mapping[str, Any]) -> bool:
    """A claim that a published number is not reproduced (lab.core.seconds.wall_not_reproduced)."""
    return bool(v.get("gap")) or str(v.get("text", "")).startswith(NOT_REPRODUCED)


def bare_verdict(c: Claim) -> Verdict:
    return c.bare()


def missing_part(scenario: Scenario, profile: Profile, why: str) -> ScenarioVerdicts:
    """A scenario this machine cannot run (`why`: a part it needs is not installed): each of
    its claims in `profile` not judged, saying why, and not counted against verify's exit."""
    verdicts: list[Verdict] = [
        {
            **bare_verdict(c),
            "held": False,
            "status": "not judged",
            "judged": False,
            "measured": why,
            "missing": why,
            "trials_asked": c.trials,
        }
        for c in scenario.claims
        if profile.judges(c)
    ]
    return ScenarioVerdicts(
        scenario.id, scenario.title, profile.name, {}, {}, 0, verdicts, missing=why
    )


def summarize(results: Sequence[ScenarioVerdicts], profile: str) -> Summary:
    missing = [v for r in results for v in r.verdicts if v.get("missing")]
    verdicts = [v for r in results for v in r.verdicts if not v.get("missing")]
    # records written before "not reproduced" was a status said "held" with a gap's text
    gaps = sum(
        1
        for v in verdicts
        if status_of(v) == "not reproduced" or (status_of(v) == "held" and is_gap(v))
    )

    def unrun(v: Verdict) -> bool:  # its counterfactual's records only --counterfactual makes
        return str(v.get("counterfactual", "")).endswith(cf.RUNS_IT)

    return Summary(
        held=sum(1 for v in verdicts if status_of(v) == "held" and not is_gap(v)),
        fitted=sum(1 for v in verdicts if status_of(v) == "fitted"),
        cannot_fail=sum(1 for v in verdicts if v.get("counterfactual") == "held"),
        by_chance=sum(
            1 for v in verdicts if str(v.get("counterfactual", "")).startswith("held in")
        ),
        gaps=gaps,
        kinds=kind_counts(verdicts),
        ungrounded=sum(
            1
            for v in verdicts
            if v.get("counterfactual_kind") == "none" and not is_gap(v) and not unrun(v)
        ),
        unrun=sum(1 for v in verdicts if unrun(v)),
        not_held=sum(1 for v in verdicts if status_of(v) == "not held"),
        not_judged=sum(1 for v in verdicts if status_of(v) == "not judged"),
        not_exercised=sum(1 for v in verdicts if status_of(v) == "not exercised"),
        skipped=sum(len(r.skipped) for r in results),
        errors=sum(1 for r in results if r.error),
        # not its cases and explores, nor a scenario this machine could not run
        scenarios=len({r.scenario for r in results} - {r.scenario for r in results if r.missing}),
        profile=profile,
        missing=len(missing),
        missing_why="; ".join(sorted({str(v["missing"]) for v in missing})),
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
    if checked and not any(i.split("-")[0] in DOCUMENT_CLAIMS for i in checked):
        # a scenario of the user's own: its ids, not the documents' coverage
        return f"claims judged: {', '.join(sorted(checked, key=id_key))}"
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


def explore_claims(scenario: Scenario, profile: Profile) -> list[Claim]:
    """Claims judged on every interleaving of the scenario's pinned sessions."""
    return [c for c in scenario.claims if c.explore and profile.judges(c)]
