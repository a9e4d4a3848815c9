"""The documents' seconds: the settings (network RTT, node-postgres' pool) found by
measurement for checkout-deadlock and money-transfer, and the claims judged under them.

The documents ran Node 24 + node-postgres against PostgreSQL 17.11 over a network at
deadlock_timeout = 1 s. Two physical knobs stand for that setup here: `--rtt` (a delay
proxy process between the actors and PostgreSQL) and `--connect tx-pool:10` (a client
per transaction attempt from a FIFO pool of 10, node-postgres' default size). The search
(README.md, "The published seconds") found:

- the pool, not the network, makes the buggy checkout's ~99 s: tx-pool:10 gives 77 s at
  no added RTT, per-actor connections 4 s at 22 ms;
- the sorted checkout's 10955 ms for 200 carts is 55 ms per serialized checkout = two
  round trips under the lock + 2 x 5 ms pause: RTT ~22 ms predicted; 18 ms asked (~21
  measured through the proxy on this loaded machine) gave 11.7 s;
- the 40-cart run's 6.1 s is 152 ms per checkout: RTT ~70 ms, so the two published
  checkout runs cannot come from one network (each gets its own case);
- the fixed transfer's 5841 ms needs ~36 ms asked (measured ~40 ms: about 4 round trips
  per transfer under the locks); at that setting the buggy transfer's counts and attempts
  match the document, its 434769 ms does not (42-76 s at RTT 0-200 ms): not reproduced,
  kept visible.

Each case's RTT was fitted to its fixed wall time, so those three claims are FITTED (not
counted held); the buggy runs' seconds, shares and attempts at the same setting are the
out-of-sample checks. Three RTTs for one document's network is itself a finding: no
single environment explains the three fixed walls (docs/claims.md says which disagree).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from lab.claims import Claim, Record, all_ok, repeated
from lab.published import Measured, at_size
from lab.seconds import share_near, wall_not_reproduced, wall_within

POOL = "tx-pool:10"  # node-postgres' `new Pool()` default, a client per transaction attempt
TOLERANCE = 0.30  # single runs on this shared 2-core machine moved 10-15 % between runs
SHARE_POINTS = 0.15  # how many carts deadlock varies run to run (see README)
GAP_BELOW = 0.5  # the buggy transfer stays under half the published seconds (measured x0.14-0.17)
# How many of the 40 transfers end in 40P01 moved between single runs (55 % once, 70 % on
# a rerun, published 72 %): the share is judged on 3 runs and must hold in 2 of them, which
# also puts the median of the 3 inside the band.
SHARE_TRIALS, SHARE_REQUIRED = 3, 2 / 3

CHECKOUT_200, CHECKOUT_40, TRANSFER = "node-200", "node-40", "node"
CHECKOUT_CASES: Mapping[str, Mapping[str, Any]] = {
    CHECKOUT_200: {"n": 200, "connect": POOL, "rtt": "18"},
    CHECKOUT_40: {"n": 40, "connect": POOL, "rtt": "70"},
}
TRANSFER_CASES: Mapping[str, Mapping[str, Any]] = {
    TRANSFER: {"n": 40, "connect": POOL, "rtt": "36"},
}


def _published_only(claim: Claim, case: str) -> Claim:
    return replace(claim, profiles=("published",), cases=(case,))


def _numbers(m: Measured | None) -> tuple[float, dict[str, int]]:
    assert m is not None and m.wall_ms is not None and m.outcomes is not None, m
    return m.wall_ms, dict(m.outcomes)


def _checkout(case: str, n: int, measured: Mapping[str, Sequence[Measured]]) -> list[Claim]:
    buggy_ms, buggy = _numbers(at_size(measured["buggy"], n))
    fixed_ms, _ = _numbers(at_size(measured["fixed"], n))
    return [
        wall_within("DL-3", "buggy", buggy_ms, TOLERANCE, case, f"{n} carts, cart order"),
        # the case's RTT was chosen from this very number: FITTED, never counted held
        replace(
            wall_within("DL-3", "fixed", fixed_ms, TOLERANCE, case, f"{n} carts, sorted"),
            fitted=True,
        ),
        share_near("DL-3", "buggy", "40P01", buggy, SHARE_POINTS, case, f"{n} carts, cart order"),
        _published_only(
            all_ok("DL-3", "fixed", f"{n} carts, sorted: every checkout succeeds"), case
        ),
    ]


def checkout_seconds(measured: Mapping[str, Sequence[Measured]]) -> tuple[Claim, ...]:
    """The published checkout runs (200 and 40 carts), each judged under its own case."""
    return (*_checkout(CHECKOUT_200, 200, measured), *_checkout(CHECKOUT_40, 40, measured))


ATTEMPTS_TOLERANCE = 0.15


def transfer_seconds(measured: Mapping[str, Sequence[Measured]]) -> tuple[Claim, ...]:
    """The published 40-transfer runs, judged under the node case."""
    buggy, fixed = measured["buggy"][0], measured["fixed"][0]
    buggy_ms, buggy_counts = _numbers(buggy)
    fixed_ms, _ = _numbers(fixed)
    attempts = buggy.attempts
    assert attempts is not None

    def attempts_near(records: Mapping[str, Record]) -> tuple[bool, str]:
        got = int(records["buggy"].get("counters", {}).get("attempts", 0))
        ratio = got / attempts
        return abs(ratio - 1) <= ATTEMPTS_TOLERANCE, (
            f"buggy: attempts={got} vs published {attempts} (x{ratio:.2f})"
        )

    return (
        # the case's RTT was chosen from this very number: FITTED, never counted held
        replace(
            wall_within("DL-7", "fixed", fixed_ms, TOLERANCE, TRANSFER, "40 transfers, fixed"),
            fitted=True,
        ),
        repeated(
            share_near(
                "DL-7", "buggy", "40P01", buggy_counts, SHARE_POINTS, TRANSFER, "40 transfers"
            ),
            trials=SHARE_TRIALS,
            required=SHARE_REQUIRED,
        ),
        Claim(
            "DL-8",
            f"40 transfers, buggy: attempts within ±{ATTEMPTS_TOLERANCE:.0%} of the published",
            ("buggy",),
            attempts_near,
            published=f"attempts={attempts}",
            profiles=("published",),
            cases=(TRANSFER,),
        ),
        wall_not_reproduced(
            "DL-7",
            "buggy",
            buggy_ms,
            GAP_BELOW,
            TRANSFER,
            "the buggy transfer stays far below it at every physical setting tried (RTT "
            "0-200 ms; pools of 2, 10 or one per actor; deadlock_timeout 1 s; README)",
        ),
    )
