"""lock-wait-modes: what the documents claim, how each claim is judged, and the assembly.

Waiting needs an order (s1 holds while s2 asks): it is judged on pinned schedules
(`locklab explore lock-wait-modes`), for the row and the table lock: the server shows s2
blocked or not, the transcript shows whether s2's answer came before or after s1's
COMMIT, and the invariant checks how long a 55P03 took (s2 times its own statement).
Under a load (`locklab run`, holder and waiter racing) only that invariant is judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lab.core.claims import Claim, Record, invariants_hold, on_mutant
from lab.core.scenario import Defaults, Param, declare
from lab.core.steps import as_actor
from lab.pinned import error_in, kept_in_all
from scenarios.lock_wait_modes import lock_wait_modes as code

RC = "read_committed"
SCHEDULES = {"ask-row": "row-held", "ask-table": "table-held"}  # s2's step -> its schedule
PUBLISHED = {
    "buggy": "Mặc định, xin lock bị xung đột thì chờ vô hạn.",
    "fixed-nowait": "NOWAIT: báo lỗi ngay ERROR: could not obtain lock on row in relation "
    '"inventory" (SQLSTATE 55P03)',
    "fixed-lock-timeout": "SET lock_timeout = '2s': chờ tối đa 2 giây rồi lỗi canceling "
    "statement due to lock timeout (55P03)",
}


def _answer(run: Mapping[str, Any], step: str) -> tuple[str, bool]:
    """s2's answer to `step` (its result text) and whether it came after s1's COMMIT."""
    lines = run["transcript"].splitlines()
    commit = next(i for i, x in enumerate(lines) if x.startswith("s1 commit"))
    mine = [(i, x) for i, x in enumerate(lines) if x.startswith(f"s2 {step} ")]
    i, last = mine[-1]  # the <... completed> line when it waited
    cut = max(last.rfind(m) for m in ("-> ", "<... completed> ", "ERROR "))
    return " ".join(last[cut:].split()), i > commit


def answers(
    cid: str,
    variant: str,
    text: str,
    *,
    waits: bool,
    error: Mapping[str, str],
    after_commit: bool,
    published: str = "",
) -> Claim:
    """For the row (schedule row-held) and the table (table-held): s2's ask was shown
    blocked (`waits`), its answer is 55P03 with `error[step]` (none when `error` is empty) and came
    after s1's COMMIT
    (`after_commit`) or before it; the invariants held."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        cell = records[variant]["by_isolation"].get(RC)
        if cell is None:
            return None
        held, seen = True, []
        for step, name in SCHEDULES.items():
            run = cell["canonical"].get(name)
            if run is None:
                return False, f"{variant}: no canonical schedule {name!r} in the record"
            answer, late = _answer(run, step)
            waited = f"s2 {step}" in run["waited"]
            got = f"55P03 {error[step]}" in answer if error else "ERROR" not in answer
            held &= waited == waits and got and late == after_commit and run["kept"]
            when = "after" if late else "before"
            seen.append(f"{step}: {'waited, ' if waited else ''}{answer} ({when} s1 COMMIT)")
        return held, f"{variant}: " + "; ".join(seen)

    return Claim(cid, text, (variant,), check, published, explore=True, levels=(RC,))


# Each variant times its own 55P03 against its own bound, and the server keeps that bound:
# the counterfactuals (load and explore) are each fix with its wait mode swapped for the
# other's (code mutants), timed against the bound it claims.
NOWAIT_DROPPED, TIMEOUT_DROPPED = "mutant-nowait-dropped", "mutant-timeout-dropped"


def _under_load(variant: str, text: str, mutant: str) -> Claim:
    """The invariants held, judged only when the load produced a 55P03: with none, nothing
    contended and the timing invariant held vacuously, so the claim is not exercised. Its
    counterfactual: `mutant`, the variant's wait mode swapped for the other one."""
    claim = on_mutant(invariants_hold("LC-12", variant, text), mutant)

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        if not records[variant].get("outcomes", {}).get("55P03", 0):
            return None  # no refusal to time: this run did not contend
        return claim.check(records)

    return replace(claim, check=check, timing=True)  # its invariant times each 55P03


CLAIMS = (
    answers(
        "LC-12",
        "buggy",
        "buggy: without NOWAIT or lock_timeout the waiter waits until the holder commits, for "
        "row and table locks alike",
        waits=True,
        error={},
        after_commit=True,
        published=PUBLISHED["buggy"],
    ),
    answers(
        "LC-12",
        "fixed-nowait",
        "fixed-nowait: NOWAIT fails with 55P03 and the document's text, without queueing",
        waits=False,
        error={step: text for step, (_, text) in code.ASKS.items()},
        after_commit=False,
        published=PUBLISHED["fixed-nowait"],
    ),
    answers(
        "LC-12",
        "fixed-lock-timeout",
        "fixed-lock-timeout: lock_timeout fails with 55P03 while the holder still holds, for "
        "row and table locks alike",
        waits=True,
        error=dict.fromkeys(code.ASKS, code.TIMEOUT_TEXT),
        after_commit=False,
        published="chờ tối đa 2 giây rồi lỗi canceling statement due to lock timeout (55P03). "
        "Áp dụng cho mọi loại lock, kể cả table lock của DDL.",
    ),
    on_mutant(
        kept_in_all(
            "LC-12",
            "fixed-lock-timeout",
            "fixed-lock-timeout: every 55P03 in every interleaving came once the timeout had "
            "passed, never before",
        ),
        TIMEOUT_DROPPED,
    ),
    on_mutant(
        kept_in_all(
            "LC-12",
            "fixed-nowait",
            "NOWAIT fails sooner than lock_timeout would fire, in every interleaving",
        ),
        NOWAIT_DROPPED,
    ),
    error_in("LC-12", "buggy", "55P03", "buggy: no interleaving ends in 55P03", expect=False),
    *(
        _under_load(
            v,
            f"{v}: under a load too, every 55P03 came as fast (NOWAIT) or as late "
            "(lock_timeout) as it should",
            mutant,
        )
        for v, mutant in (("fixed-nowait", NOWAIT_DROPPED), ("fixed-lock-timeout", TIMEOUT_DROPPED))
    ),
    *(
        error_in("LC-12", v, "55P03", f"{v}: some interleavings end in 55P03", expect=True)
        for v in ("fixed-nowait", "fixed-lock-timeout")
    ),
)

SCENARIO = declare(
    code,
    mutants={
        NOWAIT_DROPPED: as_actor(code.nowait_dropped),
        TIMEOUT_DROPPED: as_actor(code.timeout_dropped),
    },
    pinned=replace(
        code.PINNED,
        mutants={
            NOWAIT_DROPPED: (code.nowait_dropped, code.PINNED.steps["fixed-nowait"]),
            TIMEOUT_DROPPED: (code.timeout_dropped, code.PINNED.steps["fixed-lock-timeout"]),
        },
        # the mutant that asks with a lock_timeout waits for it, as fixed-lock-timeout does
        ends_by_itself={
            **code.PINNED.ends_by_itself,
            NOWAIT_DROPPED: code.PINNED.ends_by_itself["fixed-lock-timeout"],
        },
    ),
    validate=code.validate,
    outcomes=("ok", "55P03"),
    claims=CLAIMS,
    published=PUBLISHED,
    # each holder (even actors) starts 20 ms before its waiter: in a burst the waiter often
    # got in first, no 55P03 was timed and the load claims went unexercised (see below)
    defaults=Defaults(n=2, arrival="stagger:20ms", run_timeout_s=60),
    params={
        "lock_timeout_ms": Param(
            200, "SET LOCAL lock_timeout of fixed-lock-timeout (published: 2000)", min=1
        ),
        "hold_ms": Param(400, "how long the holder works inside its transaction before it commits"),
    },
    sources=("LC",),
    # Two holders and two waiters on the one row. In a burst, one of each let the waiter in
    # before the holder (no 55P03 timed, the load claims not exercised: 3 of 6 in three
    # verify runs), and two of each still did in 1 of 3 quick verifies on lanes; staggered,
    # a holder holds before its waiter asks. The claims judge each 55P03, any count.
    quick={"n": 4},
)
