"""A claim judged a second time, on records it does not speak of: can it fail?

A verdict is worth what it could have said otherwise. Each claim is judged again on its
counterfactual and the verdict says what that gave:

* ``failed``: the clause that carries the sentence fails there (good: the claim can fail);
* ``held``: it holds there too, so it cannot tell the bug from the fix (a defect);
* ``none: <why>``: no counterfactual could be judged (the claim says why it has none, the
  other variant was not run, or the check does not judge those records).

The counterfactual (``Claim.counterfactual``): by default each variant the claim names is
replaced by one of the other kind (a buggy claim reads fixed's record, a fixed claim
buggy's; a claim comparing the two reads them swapped; "<variant>@<case>" keeps its case).
A claim meant to hold on every variant declares a swap to a variant or case that breaks
it, or an `Edit` of its own records: the same variant's real cell at another isolation
level, or (only where no run can give the opposite, saying why) a quantity changed. Each
verdict names its counterfactual's kind (`kind`): run, level, code-mutation, record-edit
or none. A settings guard (the check returns None), NotJudged or an exception is ``none:``, never
``failed``: only the claim's own clause failing counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lab.core.claims import Claim, Edit, NotJudged, NotReproduced, Record


def kind(claim: Claim, said: str = "") -> str:
    """What the claim's counterfactual is (lab.core.claims.KINDS): as declared, or "none"
    when `said` (what judging it gave) is ``none: ...``: nothing was judged."""
    cf = claim.counterfactual
    if said.startswith("none:") or isinstance(cf, str):
        return "none"
    if claim.counterfactual_kind:
        return claim.counterfactual_kind
    if isinstance(cf, Edit):
        return cf.kind
    return "record-edit" if callable(cf) else "run"


def edit_reason(claim: Claim) -> str:
    """Why a record edit is the claim's counterfactual ("" if it is not one or says none)."""
    cf = claim.counterfactual
    return cf.why if isinstance(cf, Edit) else ""


RUNS_IT = "(verify --counterfactual runs it)"  # how a plain verify's missing record reads


def is_fixed(variant: str) -> bool:
    """Variants named fixed* carry a fix; every other one (buggy*, timeout-only, ...) not."""
    return variant.split("@", 1)[0].startswith("fixed")


def is_buggy(variant: str) -> bool:
    """Variants named buggy* carry the bug the documents describe."""
    return variant.split("@", 1)[0].startswith("buggy")


def swap(claim: Claim, variants: Sequence[str]) -> dict[str, str] | str:
    """Which record each variant the claim names is replaced by, or why there is none.
    Undeclared, buggy* and fixed* swap for the first of the other kind; a variant that is
    neither (a partial fix, a failure injection) or a claim comparing two variants of one
    kind (two fixes) has no default: its counterfactual must be declared, by name."""
    if isinstance(claim.counterfactual, Mapping):
        return dict(claim.counterfactual)
    named = [v.split("@", 1)[0] for v in claim.variants]
    neither = [v for v in named if not is_fixed(v) and not is_buggy(v)]
    if neither:
        return f"{', '.join(neither)} is neither buggy nor fixed: declare its counterfactual"
    if len(set(named)) > 1 and len({is_fixed(v) for v in named}) == 1:
        return "it compares variants of one kind: declare its counterfactual"
    fixed = [v for v in variants if is_fixed(v)]
    other = [v for v in variants if is_buggy(v)]
    if not fixed or not other:
        return "the scenario has no variant of the other kind"
    out: dict[str, str] = {}
    for name in claim.variants:
        variant, at, case = name.partition("@")
        out[name] = (other[0] if is_fixed(variant) else fixed[0]) + at + case
    return out


def swap_names(claim: Claim, variants: Sequence[str]) -> list[str]:
    """The record names a claim's swap reads ("<variant>" or "<variant>@<case>")."""
    if claim.counterfactual is not None and not isinstance(claim.counterfactual, Mapping):
        return []  # a mutation reads the claim's own records; a reason reads none
    got = swap(claim, variants)
    return [] if isinstance(got, str) else list(got.values())


def swapped_variants(claim: Claim, variants: Sequence[str]) -> set[str]:
    """The variants (without case) a claim's swap reads: what verify must also run."""
    return {v.split("@", 1)[0] for v in swap_names(claim, variants)}


def records_of(
    claim: Claim, records: Mapping[str, Record], variants: Sequence[str]
) -> Mapping[str, Record] | str:
    """The claim's counterfactual records, or why there are none."""
    cf = claim.counterfactual
    if isinstance(cf, str):
        return cf
    if callable(cf) and not isinstance(cf, Mapping):
        return cf(records)
    mapping = swap(claim, variants)
    if isinstance(mapping, str):
        return mapping
    missing = sorted({o for o in mapping.values() if o not in records})
    if missing:
        return f"no record of {', '.join(missing)} in this run {RUNS_IT}"
    unexplored = sorted(
        f"{o} at {lv}" for o in set(mapping.values()) for lv in _unexplored(claim, records[o])
    )
    if unexplored:
        return f"no explore of {', '.join(unexplored)} in this run {RUNS_IT}"
    out = dict(records)
    for name, other in mapping.items():
        out[name] = records[other]
    return out


def _unexplored(claim: Claim, record: Record) -> list[str]:
    """The levels an explore claim reads that `record` (an explore's) has no cell for: a
    plain verify explores the swapped variant only at the levels its own claims need."""
    cells = record.get("by_isolation") if claim.explore else None
    return [lv for lv in claim.levels if lv not in cells] if isinstance(cells, Mapping) else []


def judge(
    claim: Claim, trials: Sequence[Mapping[str, Record]], variants: Sequence[str]
) -> tuple[str, str]:
    """(``failed`` | ``held`` | ``held in k of n`` | ``none: <why>``, what was measured
    there) over the trials that have what the counterfactual reads: held when as many
    trials hold as the claim itself needs, failed only when it failed in every trial; a
    claim that held in some is named so (a counterfactual it fails only by chance)."""
    held: list[bool] = []
    why, measured = "no trial has the claim's records", ""
    for records in trials:
        if any(v not in records for v in claim.variants):
            continue
        cf = records_of(claim, records, variants)
        if isinstance(cf, str):
            why = cf
            continue
        try:
            got = claim.check(cf)
        except NotJudged as exc:
            why = f"not judged there: {exc}"
            continue
        except NotReproduced as exc:  # the published number missed there: the claim failed
            held.append(False)
            measured = measured or str(exc)
            continue
        except Exception as exc:  # a record without what the check reads
            why = f"the check cannot read those records ({type(exc).__name__}: {exc})"
            continue
        if got is None:
            why = "the check does not judge those settings"
            continue
        held.append(bool(got[0]))
        measured = measured or got[1]
    if not held:
        return f"none: {why}", ""
    if sum(held) >= claim.needed(len(held)):
        return "held", measured
    if any(held):  # not held as the claim is judged, yet not failed in every trial either
        return f"held in {sum(held)} of {len(held)}", measured
    return "failed", measured
