"""The documents' seconds: the settings (network RTT, node-postgres' pool) found by
measurement for checkout-deadlock and money-transfer, and the claims judged under them.

The documents ran Node 24 + node-postgres against PostgreSQL 17.11 over a network at
deadlock_timeout = 1 s. Two physical knobs stand for that setup here: `--rtt` (a delay
proxy process between the actors and PostgreSQL) and `--connect tx-pool:10` (a client
per transaction attempt from a FIFO pool of 10, node-postgres' default size). The search
(docs/published-seconds.md) found:

- the pool, not the network, makes the buggy checkout's ~99 s: tx-pool:10 gives 77 s at
  no added RTT, per-actor connections 4 s at 22 ms;
- the sorted checkout's 10955 ms for 200 carts is 55 ms per serialized checkout = two
  round trips under the lock + 2 x 5 ms pause: RTT ~22 ms predicted; 18 ms asked (~21
  measured through the proxy on this loaded machine) gave 11.7 s;
- the 40-cart run's 6.1 s is 152 ms per checkout: RTT ~70 ms, and the fixed transfer's
  5841 ms ~36 ms: the three fixed walls ask for three networks.

One document ran on one network, so the lab fits one: on the fit set (the 200-cart
sorted checkout's 10955 ms, FITTED, never counted held) and judges every other published
timing out of sample there, each within TOLERANCE (held) or NOT REPRODUCED with its
ratio, never "not held". At RTT 18 ms the buggy 200-cart run's seconds, every 40P01
share and the buggy transfer's attempts hold; the 40-cart runs' seconds (x0.60 buggy,
x0.38 fixed), the fixed transfer's (x0.60) and the buggy transfer's 434769 ms (x0.14-0.17)
were measured outside it (docs/one-environment.md has the table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from lab.core.claims import Claim, NotReproduced, Record, all_ok, repeated
from lab.core.published import Measured, at_size
from lab.core.seconds import share_near, wall_within

POOL = "tx-pool:10"  # node-postgres' `new Pool()` default, a client per transaction attempt
TOLERANCE = 0.30  # single runs on this shared 2-core machine moved 10-15 % between runs
SHARE_POINTS = 0.15  # how many carts deadlock varies run to run (docs/published-seconds.md)
# How many of the 40 transfers end in 40P01 moved between single runs (55 % once, 70 % on
# a rerun, published 72 %): the share is judged on 3 runs and must hold in 2 of them, which
# also puts the median of the 3 inside the band.
SHARE_TRIALS, SHARE_REQUIRED = 3, 2 / 3

CHECKOUT_200 = "node-200"
CHECKOUT_40 = "node-40"
TRANSFER = "node"
# One document, one network. The fit set, declared before the rest was judged: the
# 200-cart sorted checkout's 10955 ms alone, which gave RTT 18 ms asked (~22 measured
# through the proxy). Every other published timing is judged out of sample at that one
# setting (docs/one-environment.md lists the fits tried and what each gave).
NETWORK: Mapping[str, Any] = {"connect": POOL, "rtt": "18"}
FIT_SET = {(CHECKOUT_200, "fixed")}
CHECKOUT_CASES: Mapping[str, Mapping[str, Any]] = {
    CHECKOUT_200: {"n": 200, **NETWORK},
    CHECKOUT_40: {"n": 40, **NETWORK},
}
TRANSFER_CASES: Mapping[str, Mapping[str, Any]] = {TRANSFER: {"n": 40, **NETWORK}}


def _wall(cid: str, case: str, variant: str, published_ms: float, text: str) -> Claim:
    """A published wall time at the one network, within TOLERANCE or NOT REPRODUCED;
    FITTED when it is the fit set."""
    claim = wall_within(cid, variant, published_ms, TOLERANCE, case, text)
    return replace(claim, fitted=(case, variant) in FIT_SET)


def _published_only(claim: Claim, case: str) -> Claim:
    return replace(claim, profiles=("published",), cases=(case,))


def _numbers(m: Measured | None) -> tuple[float, dict[str, int]]:
    assert m is not None and m.wall_ms is not None and m.outcomes is not None, m
    return m.wall_ms, dict(m.outcomes)


def _checkout(case: str, n: int, measured: Mapping[str, Sequence[Measured]]) -> list[Claim]:
    buggy_ms, buggy = _numbers(at_size(measured["buggy"], n))
    fixed_ms, _ = _numbers(at_size(measured["fixed"], n))
    return [
        _wall("DL-3", case, "buggy", buggy_ms, f"{n} carts, cart order"),
        _wall("DL-3", case, "fixed", fixed_ms, f"{n} carts, sorted"),
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
        measured = f"buggy: attempts={got} vs published {attempts} (x{ratio:.2f})"
        if abs(ratio - 1) > ATTEMPTS_TOLERANCE:
            raise NotReproduced(f"{measured}, outside ±{ATTEMPTS_TOLERANCE:.0%}")
        return True, measured

    return (
        _wall("DL-7", TRANSFER, "fixed", fixed_ms, "40 transfers, fixed"),
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
        _wall("DL-7", TRANSFER, "buggy", buggy_ms, "40 transfers, buggy"),
    )
