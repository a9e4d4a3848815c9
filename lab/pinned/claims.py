"""Claims about interleavings, judged on an explore record."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from lab.core.claims import UNDECLARED, Claim, Counterfactual, Edit, Record, Undeclared, mutation
from lab.core.records import ExploreCell, PinnedRunJson

# --- explore claims ----------------------------------------------------------------------
# Each check reads, for its variant, the cells of the isolation levels the claim names
# (`levels`); a level the record lacks leaves the claim not exercised, never held.

RC = "read_committed"


def _levels(rec: Record, levels: Sequence[str]) -> dict[str, ExploreCell] | None:
    cells = rec["by_isolation"]
    if any(lv not in cells for lv in levels):
        return None
    return {lv: cells[lv] for lv in levels}


def _explored(
    cid: str,
    variant: str,
    text: str,
    levels: Sequence[str],
    check: Callable[[dict[str, ExploreCell]], tuple[bool, str]],
    published: str = "",
) -> Claim:
    def judged(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        cells = _levels(records[variant], levels)
        if cells is None:
            return None
        held, seen = check(cells)
        return held, f"{variant}: {seen}"

    return Claim(cid, text, (variant,), judged, published, explore=True, levels=tuple(levels))


def one_interleaving_broken(variant: str, levels: Sequence[str], why: str = "") -> Edit:
    """A record edit: `variant`'s explore cells with one interleaving moved from kept to
    broke. `why` says why no run breaks one ("" only for kept_in_all's undeclared default)."""

    def change(rec: Record) -> None:
        for lv in levels:
            cell = rec["by_isolation"].get(lv)
            if cell and cell.get("ran"):
                cell["kept"], cell["broke"] = cell["kept"] - 1, cell["broke"] + 1
                return

    return mutation(variant, change, why)


def level_as(variant: str, level: str, other: str) -> Edit:
    """A counterfactual from a real run: `variant`'s cell at `level` replaced by its own cell
    at `other` (the same schedules explored at another isolation level)."""

    def swap(rec: Record) -> None:
        rec["by_isolation"][level] = rec["by_isolation"][other]

    return mutation(variant, swap, f"{variant} at {other} in place of {level}", kind="level")


def kept_in_all(
    cid: str,
    variant: str,
    text: str,
    levels: Sequence[str] = (RC,),
    published: str = "",
    counterfactual: Counterfactual | Undeclared = UNDECLARED,
) -> Claim:
    """`variant` keeps every invariant in every interleaving that ran, at each level.
    `counterfactual`: a real exploration that breaks one (None: the other variant's, buggy
    <-> fixed; a mapping: a variant by name; `level_as`: another level's cell), or a record
    edit saying why none does (`one_interleaving_broken`); undeclared, that edit without a
    reason (what claims had before issue 32; a test counts them)."""

    def check(cells: dict[str, ExploreCell]) -> tuple[bool, str]:
        seen = "; ".join(f"{lv}: kept {c['kept']}/{c['ran']}" for lv, c in cells.items())
        return all(c["ran"] > 0 and c["broke"] == 0 for c in cells.values()), seen

    if isinstance(counterfactual, Undeclared):
        counterfactual = one_interleaving_broken(variant, levels)
    claim = _explored(cid, variant, text, levels, check, published)
    return replace(claim, counterfactual=counterfactual)


def broke_in_some(
    cid: str, variant: str, text: str, levels: Sequence[str] = (RC,), published: str = ""
) -> Claim:
    """`variant` breaks an invariant in at least one interleaving at each level."""

    def check(cells: dict[str, ExploreCell]) -> tuple[bool, str]:
        seen = "; ".join(
            f"{lv}: broke {c['broke']}/{c['ran']} {c['broken_invariants']}"
            for lv, c in cells.items()
        )
        return all(c["broke"] > 0 for c in cells.values()), seen

    return _explored(cid, variant, text, levels, check, published)


def waited_in(
    cid: str,
    variant: str,
    text: str,
    *,
    expect: bool,
    levels: Sequence[str] = (RC,),
    published: str = "",
) -> Claim:
    """At each level, the server showed some step blocked in some interleaving
    (expect=True), or in none."""

    def check(cells: dict[str, ExploreCell]) -> tuple[bool, str]:
        n = {lv: c.get("waited") for lv, c in cells.items()}
        seen = "; ".join(f"{lv}: a step waited in {k}/{cells[lv]['ran']}" for lv, k in n.items())
        ran = all(c["ran"] > 0 and c.get("waited") is not None for c in cells.values())
        return ran and all(((k or 0) > 0) == expect for k in n.values()), seen

    return _explored(cid, variant, text, levels, check, published)


def error_in(
    cid: str,
    variant: str,
    sqlstate: str,
    text: str,
    *,
    expect: bool,
    levels: Sequence[str] = (RC,),
    published: str = "",
) -> Claim:
    """At each level, some interleaving ends with `sqlstate` (expect=True) or none does."""

    def check(cells: dict[str, ExploreCell]) -> tuple[bool, str]:
        n = {lv: c["sqlstates"].get(sqlstate, 0) for lv, c in cells.items()}
        seen = "; ".join(f"{lv}: {sqlstate} in {k}/{cells[lv]['ran']}" for lv, k in n.items())
        ran = all(c["ran"] > 0 for c in cells.values())
        return ran and all((k > 0) == expect for k in n.values()), seen

    return _explored(cid, variant, text, levels, check, published)


def canonical(
    cid: str,
    variant: str,
    schedule: str,
    text: str,
    *,
    outcomes: Mapping[str, str] | Sequence[str],
    waited: Sequence[str] = (),
    kept: bool,
    isolation: str = RC,
    published: str = "",
    counterfactual: Mapping[str, str] | None = None,
) -> Claim:
    """The canonical `schedule` of `variant` at `isolation` ends with `outcomes` per
    session (a mapping), or with these words in any session (a sequence: which cart the
    deadlock detector picks depends on timing), the server showed the `waited` steps
    blocked, and the invariants held (kept=True) or one broke. `counterfactual`: the
    variant whose same schedule it is judged on to show it can fail, when `variant` is
    neither buggy nor fixed."""

    def check(cells: dict[str, ExploreCell]) -> tuple[bool, str]:
        run = cells[isolation]["canonical"].get(schedule)
        if run is None:
            return False, f"no canonical schedule {schedule!r} in the record"
        got = " ".join(f"{s}={o}" for s, o in run["outcomes"].items())
        inv = "held" if run["kept"] else "BROKEN"
        seen = f"{schedule} at {isolation}: {got}; waited: {', '.join(run['waited']) or 'none'}; invariants {inv}"
        words = (
            run["outcomes"] == dict(outcomes)
            if isinstance(outcomes, Mapping)
            else sorted(run["outcomes"].values()) == sorted(outcomes)
        )
        held = words and all(w in run["waited"] for w in waited) and run["kept"] == kept
        return held, seen

    claim = _explored(cid, variant, text, (isolation,), check, published)
    return claim if counterfactual is None else replace(claim, counterfactual=counterfactual)


def on_canonical(
    cid: str,
    variant: str,
    schedule: str,
    text: str,
    check: Callable[[PinnedRunJson], tuple[bool, str]],
    *,
    isolation: str = RC,
    published: str = "",
) -> Claim:
    """A claim judged by `check` on the run of `variant`'s canonical `schedule` at
    `isolation` (its JSON: outcomes, waited, kept, transcript), for what `canonical`
    does not say (nobody waited, either session may be the victim, the rows returned)."""

    def judged(cells: dict[str, ExploreCell]) -> tuple[bool, str]:
        run = cells[isolation]["canonical"].get(schedule)
        if run is None:
            return False, f"no canonical schedule {schedule!r} in the record"
        return check(run)

    return _explored(cid, variant, text, (isolation,), judged, published)


def nobody_waited(
    cid: str, variant: str, schedule: str, text: str, *, ends: Sequence[str], published: str = ""
) -> Claim:
    """In `variant`'s canonical `schedule` the server showed no step blocked, every session
    ended with one of `ends` and the invariants held."""

    def check(run: PinnedRunJson) -> tuple[bool, str]:
        got = " ".join(f"{s}={o}" for s, o in run["outcomes"].items())
        seen = f"{schedule}: {got}; waited: {', '.join(run['waited']) or 'none'}"
        done = all(o in ends for o in run["outcomes"].values())
        return not run["waited"] and done and run["kept"], seen

    return on_canonical(cid, variant, schedule, text, check, published=published)


def step_result(run: Mapping[str, Any], session: str, step: str) -> str:
    """What `session`'s last `step` returned in a pinned run, as its transcript shows it
    (after ``->`` or ``<... completed>``); "?" if the run has no such step."""
    text: str = run["transcript"]
    lines = [x for x in text.splitlines() if x.startswith(f"{session} {step} ")]
    if not lines:
        return "?"
    last = lines[-1]
    return last[max(last.rfind("-> ") + 3, last.rfind("<... completed> ") + 16) :].strip()
