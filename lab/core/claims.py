"""Documented expectations as data, and the check that compares runs with them.

A claim is judged on the records of one run (one record per variant, same knobs). Its
check returns whether it held and what was measured, so `verify` can print the measured
value beside the published one. Constructors below cover the common shapes; a scenario
may pass any function of the records.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from lab.core.records import Record as Record
from lab.core.records import Verdict as Verdict

# (held, measured), or None when the run does not exercise the claim (e.g. a failure
# mode the run left off): the claim is then not judged, as when a variant is missing.
Check = Callable[[Mapping[str, Record]], tuple[bool, str] | None]
PROFILES = ("quick", "published")
NOT_REPRODUCED = "NOT REPRODUCED"  # how a gap claim's text starts (lab.core.seconds)

# What a claim is judged on a second time to show it can fail (lab/verify/counterfactual.py):
# None = the records of the variants it does not speak of (buggy <-> fixed, a comparison
# with its sides swapped); a mapping = that swap, named; a function = records made from the
# claim's own (an `Edit`: another isolation level's real cell, or a quantity changed where
# no run can give the opposite); a string = why it has none (shown as "none: <why>").
Mutation = Callable[[Mapping[str, Record]], Mapping[str, Record]]
Counterfactual = Mapping[str, str] | Mutation | str | None
# What a counterfactual is, as each verdict's `counterfactual_kind` says: a real record of
# another variant or case ("run"), the same variant's real cell at another isolation level
# ("level"), a variant whose code has the fix removed ("code-mutation"), the claim's own
# record with a quantity changed ("record-edit"), or none ("none").
KINDS = ("run", "level", "code-mutation", "record-edit", "none")


@dataclass(frozen=True)
class Edit:
    """A counterfactual made from the claim's own records by `make`; `kind` says what it is
    ("level": a real cell of another level, "record-edit": a quantity changed) and `why` is
    the one line saying why no run can give the opposite (a record edit needs one)."""

    make: Mutation
    why: str = ""
    kind: str = "record-edit"

    def __call__(self, records: Mapping[str, Record]) -> Mapping[str, Record]:
        return self.make(records)


# A verdict's status, one word each, counted the same by run, compare, verify and report:
# only "held" counts as held. "fitted": held, but a knob was chosen to match the number it
# checks; "not reproduced": the lab misses the published number and keeps the gap.
STATUSES = ("held", "not held", "fitted", "not reproduced", "not judged", "not exercised")


class NotReproduced(Exception):
    """Raised by a check when the run misses the published number it is about: the verdict
    is "not reproduced" with the message (the measured value and by how much), never "not
    held": coming closer to the document can never turn a claim into a failure."""


class NotJudged(Exception):
    """Raised by a check when the run could not judge the claim: the setup the claim is
    about was not produced (e.g. the client could not make the load). The message says why;
    the verdict is "not judged", never held."""


@dataclass(frozen=True)
class Claim:
    """One sentence of a document, checkable on a run's records."""

    id: str  # the document claim's id, e.g. "DL-3" (docs/claims.md lists them all)
    text: str
    variants: tuple[str, ...]  # records the check needs
    check: Check
    published: str = ""  # the document's number or sentence, verbatim where it has one
    profiles: tuple[str, ...] = PROFILES  # verify profiles the claim is judged in
    # A claim that depends on chance is judged over `trials` runs (seeds seed..seed+k-1)
    # and holds when it held in at least `required` of them (a fraction, 1.0 = every trial).
    trials: int = 1
    required: float = 1.0
    # The settings the claim is judged under: "" is the profile's own, other names are the
    # scenario's `cases` (e.g. a failure mode switched on).
    cases: tuple[str, ...] = ("",)
    # A claim that compares cases (the same run at two settings) is judged once, on records
    # named "<variant>@<case>"; its `variants` use those names, its `cases` list the cases.
    across: bool = False
    # A claim about interleavings is judged on an explore record (lab/pinned/), not on
    # load runs: `variants` name the variants explore must cover; the check reads, per
    # variant, its `by_isolation` cells.
    explore: bool = False
    levels: tuple[str, ...] = ()  # the isolation levels an explore claim reads
    # Provenance. `fitted`: a knob of this claim's setting was chosen to match the very
    # number it checks (its verdict is FITTED, never held). `setup`: "" = derived from the
    # run (the document's settings, or "scaled: ..." naming what differs); a claim may
    # state its own.
    fitted: bool = False
    setup: str = ""
    gap: bool = False  # a published number the lab does not reproduce (lab.core.seconds)
    counterfactual: Counterfactual = None
    # What the counterfactual is (KINDS): "" = as declared (None or a mapping: "run", an
    # Edit: its kind, a string: "none"); "code-mutation" names a swap to a variant whose
    # code is the fix removed.
    counterfactual_kind: str = ""
    # Parts of the sentence no check judges (listed in docs/claims.md).
    unjudged: tuple[str, ...] = ()
    # A claim about time: when it does not hold and the run's own event loop waited for a
    # CPU for MACHINE_SHARE of its window (measured, lab.load.facts.machine_window), the cause
    # is the machine: NOT JUDGED with that reason, never NOT HELD.
    timing: bool = False

    def needed(self, trials: int) -> int:
        """How many of `trials` trials must hold for the claim to hold."""
        return max(1, math.ceil(self.required * trials - 1e-9))

    def bare(self) -> Verdict:
        """The verdict's fields that come from the claim alone."""
        return {
            "id": self.id,
            "text": self.text,
            "variants": list(self.variants),
            "published": self.published,
            "profiles": list(self.profiles),
            "fitted": self.fitted,
            "gap": self.gap,
        }

    def status(self, held: bool) -> str:
        """The status of a judged verdict: a held fit is "fitted", a held gap "not
        reproduced"; neither is ever counted as held."""
        if not held:
            return "not held"
        return "fitted" if self.fitted else "not reproduced" if self.gap else "held"

    def judge(self, records: Mapping[str, Record]) -> Verdict | None:
        """The verdict, or None when the run lacks a variant or does not exercise the claim."""
        if any(v not in records for v in self.variants):
            return None
        try:
            verdict = self.check(records)
        except NotJudged as exc:
            return {
                **self.bare(),
                "held": False,
                "not_judged": True,
                "status": "not judged",
                "measured": str(exc),
            }
        except NotReproduced as exc:
            verdict, missed = (False, str(exc)), True
        else:
            missed = False
        if verdict is None:
            return None
        held, measured = verdict
        if not held and self.timing and (cause := machine_cause(records, self.variants)):
            return {
                **self.bare(),
                "held": False,
                "not_judged": True,
                "status": "not judged",
                "measured": f"the machine: {cause}; {measured}",
            }
        status = "not reproduced" if missed else self.status(bool(held))
        return {**self.bare(), "held": status == "held", "status": status, "measured": measured}


MACHINE_SHARE = 0.25  # of a window the lab's event loop spent runnable, not running
MACHINE_BUSY = 0.9  # of the cores' time busy over the window (the lab's processes and others)


def machine_cause(records: Mapping[str, Record], variants: Sequence[str]) -> str:
    """Why the machine, not the code, may have set a run's times: "" when it did not.
    Measured per record (lab.load.facts.machine_window): the lab's event loop waited for a
    CPU MACHINE_SHARE of the window, or the cores were MACHINE_BUSY busy over it (worker
    and server processes wait then too, which the loop's own wait does not show)."""
    for v in variants:
        m = (records[v].get("evidence") or {}).get("machine") or {}
        share, busy = m.get("lab_cpu_wait_share") or 0, m.get("cores_busy") or 0
        if share >= MACHINE_SHARE or busy >= MACHINE_BUSY:
            return (
                f"{v}'s event loop waited for a CPU {m.get('lab_cpu_wait_ms', 0):.0f} ms, "
                f"{share:.0%} of its window, the cores {busy:.0%} busy (limits "
                f"{MACHINE_SHARE:.0%}, {MACHINE_BUSY:.0%})"
            )
    return ""


def repeated(claim: Claim, trials: int, required: float = 1.0) -> Claim:
    """The same claim, judged over `trials` runs; holds in at least `required` of them."""
    if trials < 1 or not 0 < required <= 1:
        raise ValueError(f"{claim.id}: trials must be >= 1 and required in (0, 1]")
    return replace(claim, trials=trials, required=required)


def judge_trials(
    claim: Claim, trials: Sequence[Mapping[str, Record]], seeds: Sequence[int] = ()
) -> Verdict | None:
    """The verdict over repeated runs: "held in 4/5 trials", each trial's measured value kept.

    `trials` are the records of each run (variant -> record); runs lacking a variant the
    claim needs are not counted. None when no run has what the claim needs.
    """
    per: list[tuple[int | None, Verdict]] = []
    for i, records in enumerate(trials):
        v: Verdict | None
        try:
            v = claim.judge(records)
        except Exception as exc:  # a record without what the check reads: not held, say why
            v = {
                **claim.bare(),
                "held": False,
                "status": "not held",
                "measured": f"check failed: {type(exc).__name__}: {exc}",
            }
        if v is not None:
            per.append((seeds[i] if i < len(seeds) else None, v))
    if not per:
        return None
    count = len(per)
    missed = ("not held", "not reproduced")
    held = sum(1 for _, v in per if v["status"] not in missed and not v.get("not_judged"))
    need = claim.needed(count)
    verdict: Verdict = {**per[0][1]}
    if count > 1:
        shown = next((v for _, v in per if v["status"] in missed), per[0][1])
        verdict["measured"] = f"held in {held}/{count} trials; e.g. {shown['measured']}"
    if any(v.get("not_judged") for _, v in per):  # a trial that could not judge it
        verdict["not_judged"] = True
        verdict["status"] = "not judged"
    elif held < need and not any(v["status"] == "not held" for _, v in per):
        verdict["status"] = "not reproduced"  # it missed the published number, never failed
    else:
        verdict["status"] = claim.status(held >= need)
    verdict["held"] = verdict["status"] == "held"
    verdict["trials"] = [
        {"seed": s, "held": v["status"] not in missed, "measured": v["measured"]} for s, v in per
    ]
    verdict["trials_held"] = held
    verdict["trials_needed"] = need
    return verdict


def judge_all(claims: tuple[Claim, ...], records: Mapping[str, Record]) -> list[Verdict]:
    return [v for c in claims if (v := c.judge(records)) is not None]


def _outcomes(rec: Record) -> dict[str, int]:
    return dict(rec.get("outcomes", {}))


def _fmt(rec: Record) -> str:
    from lab.core.outcome import notation

    return f"{notation(_outcomes(rec))} in {rec.get('wall_ms', 0):.0f} ms"


# --- shapes -----------------------------------------------------------------------------


def majority(cid: str, variant: str, key: str, text: str, published: str = "") -> Claim:
    """More than half of the actors of `variant` ended with `key`."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        counts = _outcomes(records[variant])
        total = sum(counts.values())
        return counts.get(key, 0) * 2 > total, f"{variant}: {_fmt(records[variant])}"

    return Claim(cid, text, (variant,), check, published)


def all_ok(cid: str, variant: str, text: str, published: str = "", key: str = "ok") -> Claim:
    """Every actor of `variant` ended with `key` (default "ok")."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        counts = _outcomes(records[variant])
        return set(counts) == {key}, f"{variant}: {_fmt(records[variant])}"

    return Claim(cid, text, (variant,), check, published)


def deadlocks(cid: str, variant: str, text: str, *, expect: bool, published: str = "") -> Claim:
    """`variant` produced deadlocks (40P01 outcomes and server reports) or produced none."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        n40 = _outcomes(rec).get("40P01", 0)
        ev = rec.get("evidence", {})
        stat = ev.get("pg_stat_deadlocks", 0)
        reports = (ev.get("deadlocks") or {}).get("reports")
        seen = f"{variant}: 40P01={n40}, pg_stat_database.deadlocks +{stat}, log reports={reports}"
        if expect:
            return n40 > 0 and stat > 0, seen
        return n40 == 0 and stat == 0 and not reports, seen

    return Claim(cid, text, (variant,), check, published)


def mutation(
    variant: str, change: Callable[[Record], None], why: str = "", kind: str = "record-edit"
) -> Edit:
    """A counterfactual that changes `variant`'s record (a deep copy) by `change`: a record
    edit (`why`: why no run gives the opposite), or `kind` "level" for a real cell moved."""

    def mutate(records: Mapping[str, Record]) -> Mapping[str, Record]:
        rec = copy.deepcopy(records[variant])
        change(rec)
        return {**records, variant: rec}

    return Edit(mutate, why, kind)


def on_mutant(claim: Claim, mutant: str) -> Claim:
    """`claim` with a code mutant as its counterfactual: every variant it names is read from
    the run of `mutant` (a `Scenario.mutants` entry, the code with the guard the claim rests
    on dropped), which verify --counterfactual runs on the server."""
    swap = dict.fromkeys(claim.variants, mutant)
    return replace(claim, counterfactual=swap, counterfactual_kind="code-mutation")


class Undeclared:
    """A claim constructor's default counterfactual when its caller declares none."""


UNDECLARED = Undeclared()


def one_invariant_broken(variant: str, why: str = "") -> Edit:
    """A record edit: `variant`'s record with its first invariant broken. `why` says why no
    run breaks it ("" only for the undeclared default, which a test counts)."""

    def change(rec: Record) -> None:
        invs = rec.get("invariants") or []
        if invs:
            invs[0] = {**invs[0], "held": False, "detail": "edited: as a double write would read"}

    return mutation(variant, change, why)


# Why a record edit is the counterfactual of an invariant every variant of a scenario keeps
# by its transactions alone (a deadlock or a timeout rolls its victim back whole).
ATOMIC = "every variant commits or rolls back whole transactions: no run moves a row uncommitted"


def invariants_hold(
    cid: str,
    variant: str,
    text: str,
    published: str = "",
    counterfactual: Counterfactual | Undeclared = UNDECLARED,
) -> Claim:
    """Every invariant of `variant`'s run held. `counterfactual`: a real run that breaks one
    (None: the other variant, buggy <-> fixed; a mapping: a variant or case by name), or a
    record edit saying why no run does (`one_invariant_broken(variant, why)`). Undeclared,
    it is that edit without a reason (what claims had before issue 32; a test counts them)."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        invs = records[variant].get("invariants", [])
        failed = [i["name"] for i in invs if not i["held"]]
        seen = f"{variant}: " + (f"violated {', '.join(failed)}" if failed else f"{len(invs)} held")
        return bool(invs) and not failed, seen

    if isinstance(counterfactual, Undeclared):
        counterfactual = one_invariant_broken(variant)
    return Claim(cid, text, (variant,), check, published, counterfactual=counterfactual)


def invariant_broken(cid: str, variant: str, name: str, text: str, published: str = "") -> Claim:
    """The buggy side of an invariant: `variant` breaks the invariant called `name`."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        inv = next((i for i in records[variant].get("invariants", []) if i["name"] == name), None)
        if inv is None:
            return False, f"{variant}: no invariant named {name}"
        return not inv["held"], f"{variant}: {name}: {inv['detail']}"

    return Claim(cid, text, (variant,), check, published)


def at_isolation(claim: Claim, level: str) -> Claim:
    """`claim`, judged only on runs whose `isolation` param is `level`: a load claim made
    for one level is not judged (rather than not held) on a run at another."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        ok = all(records[v]["params"].get("isolation") == level for v in claim.variants)
        return claim.check(records) if ok else None

    return replace(claim, check=check)
