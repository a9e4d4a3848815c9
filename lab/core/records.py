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
    by_isolation: dict[str, dict[str, Any]]


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
