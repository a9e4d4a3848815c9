"""write-skew: what the document claims, how each claim is judged, and the assembly.

The document's example is an order: both doctors check who is on call before either
goes off call. That order is pinned (`locklab trace write-skew`) and judged on its
transcript at each isolation level: at READ COMMITTED and REPEATABLE READ both see two
on call and both commit; at SERIALIZABLE the same steps end with 40001 for the second;
with a lock both must take, the server shows the second waiting, and it then sees one
on call and refuses. `locklab explore write-skew` judges every other order of the same
steps. Under a load (`locklab run`) nothing forces the order, so only what holds under
any order is judged there: the locks and SERIALIZABLE keep someone on call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from lab.core.claims import Claim, at_isolation, invariants_hold, on_mutant
from lab.core.scenario import Defaults, Param, declare
from lab.core.steps import ISOLATION_LEVELS, as_actor
from lab.pinned import broke_in_some, canonical, error_in, kept_in_all, level_as, on_canonical
from scenarios.write_skew import write_skew as code

RC, RR, SER = ISOLATION_LEVELS
LEVEL = {RC: "READ COMMITTED", RR: "REPEATABLE READ", SER: "SERIALIZABLE"}
LOCKS = ("fixed-lock-shift", "fixed-for-update")
BOTH = "both-check-first"
PUBLISHED = (
    'Nếu invariant trải trên nhiều row mà không có row nào để khoá (ví dụ "tổng ca trực mỗi '
    'ngày ≥ 1 bác sĩ"), cân nhắc SERIALIZABLE hoặc khoá một row đại diện.'
)
ROWS = re.compile(r"(\d+) rows?(?:;|$)")


def reads(run: Mapping[str, Any]) -> dict[str, int]:
    """How many doctors each session's `check` step saw on call, from the transcript (a
    check that waited reports its rows on its `<... completed>` line)."""
    seen: dict[str, int] = {}
    for line in run["transcript"].splitlines():
        who, _, rest = line.partition(" ")
        if rest.startswith("check") and (m := ROWS.search(rest.rstrip())):
            seen[who] = int(m[1])
    return seen


def _ends(
    variant: str,
    level: str,
    text: str,
    ends: Mapping[str, str],
    read: Sequence[int],
    waited: Sequence[str],
) -> Claim:
    """In `variant`'s canonical order at `level`: each session's end, what each check read
    (s1's, s2's), and exactly the `waited` steps shown blocked by the server."""

    def check(run: Mapping[str, Any]) -> tuple[bool, str]:
        got = reads(run)
        seen = (
            f"{BOTH} at {level}: "
            + ", ".join(f"{s} saw {got.get(s)} on call, {o}" for s, o in run["outcomes"].items())
            + f"; seen waiting on a lock: {', '.join(run['waited']) or 'nobody'}"
        )
        held = (
            run["outcomes"] == dict(ends)
            and [got.get("s1"), got.get("s2")] == list(read)
            and run["waited"] == list(waited)
        )
        return held, seen

    return on_canonical("LC-31", variant, BOTH, text, check, isolation=level, published=PUBLISHED)


def _both_off(level: str) -> Claim:
    return canonical(
        "LC-31",
        "buggy",
        BOTH,
        f"buggy at {LEVEL[level]}: both go off call, nobody is on call",
        outcomes={"s1": "ok", "s2": "ok"},
        kept=False,
        isolation=level,
        published=PUBLISHED,
    )


OVERLAP = "mutant-check-pause-write"

CLAIMS = (
    _both_off(RC),
    # fixed-lock-shift breaks the rule at RR too: the counterfactual is buggy at SERIALIZABLE
    replace(_both_off(RR), counterfactual=level_as("buggy", RR, SER)),
    *(
        _ends(
            "buggy",
            lv,
            f"buggy at {LEVEL[lv]}: both see 2 on call before either writes, nobody waits: both ok",
            {"s1": "ok", "s2": "ok"},
            (2, 2),
            (),
        )
        for lv in (RC, RR)
    ),
    replace(
        _ends(
            "buggy",
            SER,
            "buggy at SERIALIZABLE: both see 2 on call before either writes; the first "
            "commits, the second gets 40001",
            {"s1": "ok", "s2": "40001"},
            (2, 2),
            (),
        ),
        # fixed-lock-shift differs at SERIALIZABLE only in waiting: the counterfactual is RC
        counterfactual=level_as("buggy", SER, RC),
    ),
    _ends(
        "fixed-lock-shift",
        RC,
        "fixed-lock-shift: the second waits for the shift's lock, then sees 1 on call and refuses",
        {"s1": "ok", "s2": "refused"},
        (2, 1),
        ("s2 lock",),
    ),
    _ends(
        "fixed-for-update",
        RC,
        "fixed-for-update: the second's check waits for the first's row locks, then sees 1 on "
        "call and refuses",
        {"s1": "ok", "s2": "refused"},
        (2, 1),
        ("s2 check",),
    ),
    broke_in_some(
        "LC-31",
        "buggy",
        "buggy breaks the on-call rule in some interleavings at READ "
        "COMMITTED and at REPEATABLE READ",
        levels=(RC, RR),
        published=PUBLISHED,
    ),
    replace(
        error_in(
            "LC-31",
            "buggy",
            "40001",
            "buggy at SERIALIZABLE: some interleavings end with 40001 for one doctor",
            expect=True,
            levels=(SER,),
            published=PUBLISHED,
        ),
        # fixed-lock-shift gets 40001 at SERIALIZABLE too: the counterfactual is buggy at RC
        counterfactual=level_as("buggy", SER, RC),
    ),
    kept_in_all(
        "LC-31",
        "buggy",
        "buggy at SERIALIZABLE keeps someone on call in every interleaving",
        levels=(SER,),
        published=PUBLISHED,
        counterfactual=level_as("buggy", SER, RC),  # at READ COMMITTED both go off call
    ),
    *(
        kept_in_all(
            "LC-31",
            v,
            f"{v} keeps someone on call in every interleaving at READ COMMITTED",
            published=PUBLISHED,
            counterfactual=None,  # buggy's interleavings leave nobody on call
        )
        for v in LOCKS
    ),
    # buggy's load leaves nobody on call only when two requests overlap, by chance: the
    # mutant is buggy's code writing once every doctor has checked, overlapping in every run,
    # at READ COMMITTED
    *(
        on_mutant(
            at_isolation(
                invariants_hold("LC-31", v, f"{v}: someone stays on call under a load"), RC
            ),
            OVERLAP,
        )
        for v in LOCKS
    ),
    # this case runs every variant at SERIALIZABLE: the counterfactual is the same mutant,
    # which opens its transactions at READ COMMITTED whatever the case asks
    replace(
        on_mutant(
            at_isolation(
                invariants_hold(
                    "LC-31",
                    "buggy",
                    "buggy at SERIALIZABLE: someone stays on call under a load",
                    PUBLISHED,
                    counterfactual=None,
                ),
                SER,
            ),
            OVERLAP,
        ),
        cases=("serializable",),
    ),
)

SCENARIO = declare(
    code,
    validate=code.validate,
    outcomes=("ok", "refused", "40001"),
    claims=CLAIMS,
    published={"buggy": code.INVARIANT, "fixed-lock-shift": PUBLISHED},
    defaults=Defaults(n=2, arrival="burst", actor_timeout_s=30, run_timeout_s=60),
    mutants={OVERLAP: as_actor(code.check_pause_write)},
    params={
        "isolation": Param(
            RC, "transaction isolation: " + ", ".join(ISOLATION_LEVELS), choices=ISOLATION_LEVELS
        ),
    },
    cases={"repeatable-read": {"isolation": RR}, "serializable": {"isolation": SER}},
    sources=("LC",),
)
