"""Counterfactuals: every claim judged again where it should fail (lab/verify/counterfactual.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lab.core.claims import (
    KINDS,
    Claim,
    Counterfactual,
    NotJudged,
    Record,
    all_ok,
    invariants_hold,
    one_invariant_broken,
)
from lab.pinned import broke_in_some, level_as
from lab.verify import ScenarioVerdicts, Trial, evaluate, summarize
from lab.verify import counterfactual as cf
from lab.verify.counterfactual import swap
from lab.verify.judge import kinds_line

ROOT = Path(__file__).resolve().parent.parent

VARIANTS = ("buggy", "fixed")


def rec(outcomes: dict[str, int], *, broken: bool = False) -> Record:
    return {
        "outcomes": outcomes,
        "invariants": [{"name": "once", "held": not broken, "detail": ""}],
    }


BUGGY, FIXED = rec({"ok": 1, "40P01": 9}, broken=True), rec({"ok": 10})
RECORDS: dict[str, Record] = {"buggy": BUGGY, "fixed": FIXED}


def test_a_fixed_claim_fails_on_buggys_records() -> None:
    """The default counterfactual reads the other variant's record: all-ok fails there."""
    assert cf.judge(all_ok("DL-3", "fixed", "sorted"), [RECORDS], VARIANTS)[0] == "failed"


def test_a_claim_that_holds_on_both_variants_is_reported_held() -> None:
    """A check that cannot tell buggy from fixed holds on its counterfactual: "held"."""
    claim = Claim("X-1", "anything", ("fixed",), lambda r: (True, "always"))
    assert cf.judge(claim, [RECORDS], VARIANTS)[0] == "held"


def test_a_counterfactual_that_held_in_some_trials_is_not_failed() -> None:
    """A claim needing 2 of 3 trials whose counterfactual held in 1 of 3 did not fail
    there: it is named "held in 1 of 3", not counted as failed."""
    seen = iter([True, False, False])
    claim = Claim(
        "X-1", "by chance", ("fixed",), lambda r: (next(seen), "x"), trials=3, required=2 / 3
    )
    assert cf.judge(claim, [RECORDS] * 3, VARIANTS)[0] == "held in 1 of 3"
    never = Claim("X-2", "never", ("fixed",), lambda r: (False, "x"), trials=3, required=2 / 3)
    assert cf.judge(never, [RECORDS] * 3, VARIANTS)[0] == "failed"


def test_invariants_hold_is_judged_on_the_other_variants_run() -> None:
    """invariants_hold declared with the swap reads buggy's real record, which breaks one."""
    claim = invariants_hold("DL-3", "fixed", "moved once", counterfactual=None)
    said, measured = cf.judge(claim, [RECORDS], VARIANTS)
    assert said == "failed" and "violated once" in measured
    assert cf.kind(claim, said) == "run"


def test_a_record_edit_says_why_and_is_named_so() -> None:
    """one_invariant_broken is a record edit carrying its reason; the record is a copy."""
    claim = invariants_hold(
        "DL-3", "fixed", "t", counterfactual=one_invariant_broken("fixed", "why")
    )
    said, measured = cf.judge(claim, [RECORDS], VARIANTS)
    assert said == "failed" and "violated once" in measured
    assert (cf.kind(claim, said), cf.edit_reason(claim)) == ("record-edit", "why")
    assert RECORDS["fixed"]["invariants"][0]["held"]


def test_each_declaration_has_its_kind() -> None:
    """run (default or named swap), level, code-mutation (declared), record-edit, none."""

    def claim(counterfactual: Counterfactual) -> Claim:
        return Claim("X-1", "t", ("fixed",), lambda r: (True, ""), counterfactual=counterfactual)

    bare = Claim("X-1", "t", ("fixed",), lambda r: (True, ""), counterfactual=lambda r: r)
    assert cf.kind(claim(None)) == cf.kind(claim({"fixed": "buggy"})) == "run"
    assert cf.kind(claim(level_as("fixed", "a", "b"))) == "level"
    assert cf.kind(replace(claim({"fixed": "unguarded"}), counterfactual_kind="code-mutation")) == (
        "code-mutation"
    )
    assert cf.kind(bare) == "record-edit" and cf.edit_reason(bare) == ""
    assert cf.kind(claim("a gap")) == "none"
    assert cf.kind(claim(None), "none: no record of buggy") == "none"  # nothing was judged
    assert set(KINDS) == {"run", "level", "code-mutation", "record-edit", "none"}


def test_summary_counts_kinds_and_none_outside_a_gap() -> None:
    """Each judged verdict says its kind; the summary counts them in KINDS' order and
    counts a `none` that is not a declared gap (what fails verify --counterfactual)."""
    gap = Claim("X-2", "t", ("fixed",), lambda r: (True, ""), counterfactual="a gap", gap=True)
    plain = Claim("X-3", "t", ("fixed",), lambda r: (True, ""), counterfactual="no reason")
    verdicts = evaluate(
        [all_ok("DL-3", "fixed", "sorted"), gap, plain], [Trial(1, RECORDS)], VARIANTS
    )
    assert [v["counterfactual_kind"] for v in verdicts] == ["run", "none", "none"]
    summary = summarize([ScenarioVerdicts("x", "x", "quick", {}, {}, 0, verdicts)], "quick")
    assert summary.kinds == {"run": 1, "level": 0, "code-mutation": 0, "record-edit": 0, "none": 2}
    assert summary.ungrounded == 1 and "1 with no counterfactual" in summary.line()
    assert kinds_line(summary.kinds).startswith("counterfactuals by kind: run 1, level 0")


def _record_edits() -> list[tuple[str, str, str]]:
    """(scenario, claim id, reason) of every quick claim whose counterfactual is a record edit."""
    from scenarios import SCENARIOS

    return [
        (sc.id, c.id, cf.edit_reason(c))
        for sc in SCENARIOS
        for c in sc.claims
        if "quick" in c.profiles and cf.kind(c) == "record-edit"
    ]


def test_every_record_edit_says_why_no_run_gives_the_opposite() -> None:
    """No generic edit is left: each record edit carries its one-line reason."""
    assert [e for e in _record_edits() if not e[2]] == []


def test_at_most_ten_record_edits() -> None:
    """Record edits remain only where no run can give the opposite: at most 10 of them."""
    assert len(_record_edits()) <= 10


def test_guards_not_judged_and_exceptions_are_none_never_failed() -> None:
    """A settings guard (None), NotJudged or a crash on the swapped record is `none:`."""

    def guarded(r: Mapping[str, Record]) -> tuple[bool, str] | None:
        return None if r["fixed"] is BUGGY else (True, "")

    def refuses(r: Mapping[str, Record]) -> tuple[bool, str]:
        if r["fixed"] is BUGGY:
            raise NotJudged("the client saturated")
        return True, ""

    def crashes(r: Mapping[str, Record]) -> tuple[bool, str]:
        return r["fixed"]["evidence"]["x"], ""

    for check in (guarded, refuses, crashes):
        said, _ = cf.judge(Claim("X-1", "t", ("fixed",), check), [RECORDS], VARIANTS)
        assert said.startswith("none: "), (check.__name__, said)


def test_a_declared_reason_and_a_missing_record_are_none() -> None:
    """A claim that says why it has none, or a run without the other variant: `none:`."""
    claim = Claim("X-1", "t", ("fixed",), lambda r: (True, ""), counterfactual="a gap")
    assert cf.judge(claim, [RECORDS], VARIANTS) == ("none: a gap", "")
    plain = all_ok("DL-3", "fixed", "sorted")
    assert cf.judge(plain, [{"fixed": FIXED}], VARIANTS)[0].startswith("none: no record of buggy")


def test_an_explore_swap_not_explored_at_the_claims_level_is_left_to_counterfactual() -> None:
    """A plain verify explores the swapped variant only where its own claims need it: a
    level its cells lack is 'verify --counterfactual runs it', not a check that judges none."""
    claim = broke_in_some("X-1", "buggy", "t", levels=("read committed", "repeatable read"))
    cell: Any = {"broke": 0, "ran": 2, "broken_invariants": []}
    broke: Any = {**cell, "broke": 1}
    buggy: Record = {"by_isolation": {"read committed": broke, "repeatable read": cell}}
    fixed: Record = {"by_isolation": {"read committed": cell}}
    said, _ = cf.judge(claim, [{"buggy": buggy, "fixed": fixed}], VARIANTS)
    assert said == f"none: no explore of fixed at repeatable read in this run {cf.RUNS_IT}"
    fixed["by_isolation"]["repeatable read"] = cell
    assert cf.judge(claim, [{"buggy": buggy, "fixed": fixed}], VARIANTS)[0] == "failed"


def test_cases_keep_their_case_when_swapped() -> None:
    """A claim across cases reads the other variant at the same case."""
    claim = Claim("X-1", "t", ("buggy@slow",), lambda r: (True, ""))
    assert cf.swap(claim, VARIANTS) == {"buggy@slow": "fixed@slow"}


def test_evaluate_records_the_counterfactual_setup_and_fitted() -> None:
    """Every judged verdict carries counterfactual, setup and fitted; a fit is never held."""
    fitted = Claim("DL-3", "wall", ("fixed",), all_ok("DL-3", "fixed", "").check, fitted=True)
    [plain, fit] = evaluate(
        [all_ok("DL-3", "fixed", "sorted"), fitted], [Trial(1, RECORDS)], VARIANTS, "document"
    )
    assert plain["status"] == "held" and plain["counterfactual"] == "failed"
    assert plain["setup"] == "document" and plain["fitted"] is False
    assert fit["status"] == "fitted" and not fit["held"]


@pytest.mark.slow
def test_no_claim_of_the_catalogue_holds_on_its_counterfactual(tmp_path: Path) -> None:
    """Quick verify --counterfactual: every judged claim fails on its counterfactual or says
    why it has none; none holds there (a claim that does cannot fail). Whether each claim
    held on its own records is verify's verdict, not this test's (they are listed)."""
    proc = subprocess.run(
        [sys.executable, "-m", "lab.cli", "verify", "--counterfactual", "--json", "--no-record"],
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "LOCKLAB_RESULTS": str(tmp_path), "NO_COLOR": "1"},
        cwd=ROOT,
    )
    assert proc.stdout.strip(), proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    verdicts = [(s["scenario"], s["case"], v) for s in doc["scenarios"] for v in s["verdicts"]]
    not_held = [(sid, case, v["id"]) for sid, case, v in verdicts if v["status"] == "not held"]
    held = [
        (sid, case, v["id"], v["text"])
        for sid, case, v in verdicts
        if v.get("counterfactual") == "held"
    ]
    assert not held, (held, doc["summary"]["line"])
    judged = [v for _, _, v in verdicts if v.get("judged")]
    assert judged, doc["summary"]["line"]
    said = {v["counterfactual"] for v in judged}
    assert all(c == "failed" or c.startswith("none: ") for c in said), (said, not_held)
    kinds = doc["summary"]["counterfactual_kinds"]  # each judged verdict names its kind
    assert list(kinds) == list(KINDS) and sum(kinds.values()) == len(judged), kinds
    assert {v["counterfactual_kind"] for v in judged} <= set(KINDS)
    assert doc["summary"]["ungrounded"] == 0, [  # none only where a gap is declared
        (v["id"], v["counterfactual"]) for v in judged if v["counterfactual_kind"] == "none"
    ]


def test_the_default_swap_is_only_buggy_for_fixed_and_back() -> None:
    """A variant neither buggy nor fixed (a partial fix, a failure injection), or a claim
    comparing two fixes, gets no default counterfactual: it must declare one by name
    (it used to read the first variant of "the other kind", e.g. fixed for timeout-only)."""
    variants = ["buggy", "timeout-only", "fixed", "fixed-coarse"]

    def claim(*names: str) -> Claim:
        return Claim("X-1", "a claim", names, lambda r: (True, "x"))

    assert swap(claim("timeout-only"), variants) == (
        "timeout-only is neither buggy nor fixed: declare its counterfactual"
    )
    assert swap(claim("fixed-coarse", "fixed"), variants) == (
        "it compares variants of one kind: declare its counterfactual"
    )
    assert swap(claim("buggy"), variants) == {"buggy": "fixed"}
    assert swap(claim("fixed-coarse"), variants) == {"fixed-coarse": "buggy"}
    assert swap(claim("buggy@a", "buggy@b"), variants) == {
        "buggy@a": "fixed@a",
        "buggy@b": "fixed@b",
    }


def test_code_mutants_are_named_by_claims_and_run_only_for_them() -> None:
    """A code-mutation counterfactual names a declared mutant of its scenario (a pinned one
    too); every mutant is read by a claim, is no variant, and verify runs it only with
    --counterfactual: in some case's load, or explored."""
    from lab.core.profiles import QUICK, claims_for
    from lab.verify import explore_plan
    from lab.verify.run import run_variants
    from scenarios import SCENARIOS

    for sc in SCENARIOS:
        named = {
            target
            for c in sc.claims
            if cf.kind(c) == "code-mutation"
            for target in cf.swap_names(c, tuple(sc.variants))
        }
        assert named <= set(sc.mutants), (sc.id, named)
        assert set(sc.mutants) <= named, (sc.id, "a mutant no claim reads")
        assert not set(sc.mutants) & set(sc.variants), sc.id
        assert set(sc.pinned.mutants if sc.pinned else {}) <= set(sc.mutants), sc.id
        assert not set(explore_plan(sc, QUICK)[1]) & set(sc.mutants), sc.id
        ran = set(explore_plan(sc, QUICK, True)[1])
        for case in ("", *sc.cases):
            claims, _ = claims_for(sc, QUICK, None, case)
            assert not set(run_variants(sc, QUICK, claims, 1, case)) & set(sc.mutants), sc.id
            ran |= set(run_variants(sc, QUICK, claims, 1, case, True))
        assert set(sc.mutants) <= ran, sc.id
