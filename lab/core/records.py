"""The shapes of what the lab writes and what claims read, for mypy to check.

A run record is one scenario x variant run (lab/load/runner.py writes it, `--json` prints
it); an explore record's per-variant entry (lab/pinned/) is what explore claims read.
Claims receive either as `Record`: every key optional, so one type serves both and old
records (which may lack newer keys) stay readable; a misspelt key is a mypy error.
"""

from __future__ import annotations

from typing import Any, TypedDict


class InvariantJson(TypedDict):
    name: str
    held: bool
    detail: str


class PinnedRunJson(TypedDict, total=False):
    """One pinned run (lab.pinned.schedules.PinnedResult.to_json): a canonical schedule's,
    or an explore cell's first failing or first erring interleaving."""

    name: str  # the canonical schedule's name, "" for an explored interleaving
    schedule: list[str]
    outcomes: dict[str, str]  # session -> its outcome word or SQLSTATE
    invariants: list[InvariantJson]
    kept: bool
    waited: list[str]  # steps the server showed blocked ("s2 write")
    transcript: str
    evidence: dict[str, Any]  # the run's env.extra_evidence: each scenario's own
    timing: dict[str, Any]  # lab.pinned.transcript.StepClock.to_json


class ExploreCell(TypedDict, total=False):
    """Every interleaving of one variant at one isolation level (lab/pinned/explore.py)."""

    interleavings: int
    ran: int
    invalid: int
    kept: int
    broke: int
    outcomes: dict[str, int]  # "s1=ok s2=40P01" -> interleavings
    broke_by: dict[str, int]
    waited: int  # interleavings in which the server showed some step blocked
    waited_steps: dict[str, int]
    broken_invariants: dict[str, int]
    sqlstates: dict[str, int]  # interleavings in which some session ended with it
    sqlstate_sessions: dict[str, int]
    step_sqlstates: dict[str, int]  # ... in which some step raised it
    first_failing: PinnedRunJson | None
    first_error: PinnedRunJson | None
    canonical: dict[str, PinnedRunJson]  # the canonical schedules' runs, by name
    canonical_only: bool  # the cell counts the canonical schedules only (Pinned's)
    # with explore's reduce: how many interleavings were not run, each equivalent to one
    # that ran (lab/pinned/reduce.py); the counts above are of the runs
    reduction: dict[str, int]


class Record(TypedDict, total=False):
    # --- a run record (schema 1) -----------------------------------------------------
    schema: int
    run_id: str
    scenario: str
    variant: str
    title: str
    started_at: str
    knobs: dict[str, Any]
    params: dict[str, Any]
    servers: dict[str, Any]
    lab: dict[str, Any]
    outcomes: dict[str, int]  # business word or SQLSTATE -> count
    wall_ms: float
    latency_ms: dict[str, float]
    latency_ms_by_outcome: dict[str, dict[str, float]]
    counters: dict[str, int]
    headline: dict[str, int]
    samples: dict[str, dict[str, float]]
    invariants: list[InvariantJson]
    evidence: dict[str, Any]
    trace: list[dict[str, Any]]
    published: str
    published_measured: list[dict[str, Any]]  # lab.core.published.Measured.to_json, per run
    claims: list[Verdict]  # the claims judged on this run (its own and its siblings')
    claims_not_judged: list[dict[str, Any]]  # the claims this run cannot judge, and why
    load: dict[str, Any]
    verify: dict[str, Any]  # verify's trial, case and profile
    # --- an explore record's entry for one variant ---------------------------------------
    steps: dict[str, Any]
    by_isolation: dict[str, ExploreCell]


class TrialVerdict(TypedDict):
    seed: int | None
    held: bool
    measured: str


class Verdict(TypedDict, total=False):
    """One claim judged on one run (or over trials): what verify prints and saves."""

    id: str
    text: str
    variants: list[str]
    published: str
    profiles: list[str]
    held: bool
    measured: str
    not_judged: bool  # the check said the run could not judge it (NotJudged)
    trials: list[TrialVerdict]
    trials_held: int
    trials_needed: int
    trials_asked: int
    judged: bool
    status: str  # one of lab.core.claims.STATUSES; only "held" counts as held
    note: str
    fitted: bool  # a knob was chosen to match the number this claim checks
    gap: bool  # a published number the lab does not reproduce
    setup: str  # "document" | "scaled: <what differs from the document's settings>"
    counterfactual: str  # "failed" | "held" | "none: <why>" (verify --counterfactual)
    counterfactual_measured: str  # what the check measured on the counterfactual
    counterfactual_kind: str  # run | level | code-mutation | record-edit | none (KINDS)
    missing: str  # not judged: a part its scenario needs is not on this machine (why)
