"""lock-timeouts: what the documents claim, how each claim is judged, and the assembly.

The claims are judged on loads of the code in lock_timeouts.py: the `slow-holder` case
(12 carts, each holding its rows past the global timeout) for the mechanism; at the
document's load (200 carts, published profile, over trials) the sentence does not
reproduce on an idle machine, and the gap is kept as NOT REPRODUCED with the 55P03 counts. The same
carts run pinned (`locklab trace lock-timeouts`, expected/): s2 queued behind s1, who holds its rows
HOLD_MS each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from lab.core.claims import (
    Claim,
    NotReproduced,
    Record,
    invariants_hold,
    on_mutant,
    repeated,
)
from lab.core.mutants import commits_partial
from lab.core.outcome import notation
from lab.core.scenario import Defaults, Param, declare
from lab.core.steps import as_actor
from scenarios.checkout_deadlock import checkout_deadlock as checkout
from scenarios.lock_timeouts import lock_timeouts as code
from scenarios.lock_timeouts.lock_timeouts import (
    GLOBAL_TIMEOUT,
    HOLDS,
    LOAD_TRIALS,
    SLOW,
    SLOW_PAUSE_MS,
    TX_TIMEOUT,
)

PARTIAL = "mutant-commits-partial"  # buggy in cart order, committing what went through


def _seen(rec: Record) -> str:
    pause = rec["params"]["step_pause_ms"]
    return (
        f"{rec['variant']}, {rec['knobs']['n']} carts, {pause:g} ms after each update: "
        f"{notation(rec['outcomes'])} in {rec['wall_ms']:.0f} ms, "
        f"transactions saw {rec['counters']}"
    )


def _fails(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    out = rec["outcomes"]
    return out.get("55P03", 0) * 2 > sum(out.values()) and not out.get("40P01"), _seen(rec)


def _all_ok(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    return set(rec["outcomes"]) == {"ok"}, _seen(rec)


def _fails_past_the_timeout(records: Mapping[str, Record]) -> tuple[bool, str]:
    """Over the spread of holds: no 55P03 while each holder keeps the row under the global
    timeout, most checkouts failing once it keeps it past."""
    parts, held = [], True
    for case, pause in HOLDS.items():
        out = records[f"buggy@{case}"]["outcomes"]
        failed = out.get("55P03", 0)
        past = 2 * pause > float(GLOBAL_TIMEOUT.removesuffix("ms"))
        held = held and (failed * 2 > sum(out.values()) if past else failed == 0)
        parts.append(f"hold {2 * pause:.0f} ms: {notation(out)}")
    return held, "buggy: " + "; ".join(parts)


def _fails_at_load(records: Mapping[str, Record]) -> tuple[bool, str]:
    """Most sorted carts fail with 55P03 at the document's load; measured here they fail only
    when a holder stalls past 100 ms, so this reads NOT REPRODUCED, with the count."""
    out = records["buggy"]["outcomes"]
    failed = out.get("55P03", 0)
    seen = f"{_seen(records['buggy'])}; 55P03 for {failed}"
    if failed * 2 <= sum(out.values()):
        raise NotReproduced(f"{seen}: not most")
    return True, seen


CLAIMS = (
    Claim(
        "LC-27",
        f"buggy, each holder keeping the row ~{2 * SLOW_PAUSE_MS:.0f} ms: under the global "
        f"{GLOBAL_TIMEOUT} "
        "lock_timeout most sorted checkouts (no deadlock possible) fail with 55P03",
        ("buggy",),
        _fails,
        published="đặt 100 ms toàn cục làm checkout lỗi mỗi khi có contention bình thường",
        cases=(SLOW,),
    ),
    Claim(
        "LC-27",
        f"buggy, over holds of {', '.join(f'{2 * p:.0f}' for p in HOLDS.values())} ms: the "
        f"global {GLOBAL_TIMEOUT} lock_timeout fails no checkout while each holder keeps the "
        "row under it, and most once it keeps it past",
        tuple(f"buggy@{case}" for case in HOLDS),
        _fails_past_the_timeout,
        published="đặt 100 ms toàn cục làm checkout lỗi mỗi khi có contention bình thường",
        cases=tuple(HOLDS),
        across=True,
        timing=True,  # a holder the machine stalls past 100 ms is the machine's doing
        counterfactual={
            f"buggy@{case}": f"fixed@{case}" for case in HOLDS
        },  # SET LOCAL: none fails at any hold
    ),
    Claim(
        "LC-27",
        f"fixed, same slow holders: SET LOCAL lock_timeout = '{TX_TIMEOUT}' in each "
        "transaction: every checkout succeeds, on the same database",
        ("fixed",),
        _all_ok,
        published="await c.query(\"SET LOCAL lock_timeout = '3s'\")",
        cases=(SLOW,),
    ),
    # At 200 carts a run fails carts only when some holder stalls past 100 ms (a busy event
    # loop or CPU): 0 to 198 of 200 per run, depending on the machine's load. The sentence
    # is not reproduced at that load; the gap is kept (it turns NOT HELD the day most carts
    # fail), and no claim on fixed at that load: with buggy failing none it could not fail.
    repeated(
        Claim(
            "LC-27",
            "at the document's load (200 sorted carts, 5 ms between updates) most checkouts "
            f"fail under the global {GLOBAL_TIMEOUT} lock_timeout",
            ("buggy",),
            _fails_at_load,
            published="đặt 100 ms toàn cục làm checkout lỗi mỗi khi có contention bình thường",
            profiles=("published",),
        ),
        trials=LOAD_TRIALS,
    ),
    # Both variants keep it by their transactions: a 55P03 rolls its victim back whole. Its
    # counterfactual drops that (carts in cart order, each committing what went through):
    # a cart timed out on its second row keeps its first.
    *(
        replace(
            on_mutant(invariants_hold("LC-27", v, f"{v}: stock moved once per commit"), PARTIAL),
            cases=("", SLOW),
        )
        for v in ("buggy", "fixed")
    ),
)

SCENARIO = declare(
    code,
    outcomes=("ok", "55P03", "40P01"),
    claims=CLAIMS,
    published={
        "buggy": "lock_timeout = 100ms toàn cục: checkout lỗi (55P03) khi có contention",
        "fixed": "SET LOCAL lock_timeout = '3s' trong withTx",
    },
    invariant=checkout.invariant,
    mutants={PARTIAL: as_actor(commits_partial(code.cart_order))},
    defaults=Defaults(n=200, arrival="burst", actor_timeout_s=60, run_timeout_s=300),
    params={
        "step_pause_ms": Param(
            5.0, "pause after each UPDATE while the row is held ('other logic')", min=0
        ),
    },
    sources=("LC",),
    # the holds are real time against a 100 ms lock_timeout: beside CPU-bound runs a holder
    # stalled for a CPU (up to 29 % of hold-20ms's window, quick verify on 6 lanes here)
    timed=tuple(HOLDS),
    quick={"n": 40},
    cases={
        SLOW: {"n": 12, "step_pause_ms": SLOW_PAUSE_MS},
        **{case: {"n": 12, "step_pause_ms": pause} for case, pause in HOLDS.items()},
    },
)
