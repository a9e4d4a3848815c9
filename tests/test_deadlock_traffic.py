"""deadlock-traffic on real servers: the cart-order checkout's 40P01 count rises with n."""

from __future__ import annotations

from lab.core.profiles import QUICK
from lab.core.records import Record
from scenarios.deadlock_traffic import SCENARIO
from scenarios.deadlock_traffic.claims import CLAIMS
from scenarios.deadlock_traffic.deadlock_traffic import CASES, POINTS, SIZES
from tests.conftest import RunFn


def test_registered_with_a_case_per_size() -> None:
    """The scenario is in the catalogue; its cases and defaults cover every size of the claim."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    assert [CASES[c]["n"] for c in POINTS[:-1]] + [SCENARIO.defaults.n] == list(SIZES)
    assert SCENARIO.defaults.arrival == "burst"


def _rec(n: int, deadlocks: int) -> Record:
    return {
        "knobs": {"n": n, "deadlock_timeout_ms": 100},
        "outcomes": {"ok": n - deadlocks, "40P01": deadlocks},
        "evidence": {"pg_stat_deadlocks": deadlocks},
    }


def test_the_claim_fails_when_a_step_does_not_rise() -> None:
    """The across-cases check holds on a rising curve and fails on one flat step."""
    grows = CLAIMS[0].check
    rising = {f"buggy@{c}": _rec(n, n - 1) for c, n in zip(POINTS, SIZES, strict=True)}
    rose = grows(rising)
    assert rose is not None and rose[0]
    flat = {**rising, "buggy@n40": _rec(40, rising["buggy@n20"]["outcomes"]["40P01"])}
    verdict = grows(flat)
    assert verdict is not None and not verdict[0]


async def test_more_carts_more_deadlocks_sorted_none(run_scenario: RunFn) -> None:
    """At burst, 40 cart-order carts deadlock more often than 10; 40 sorted carts never do."""
    small = (await run_scenario(SCENARIO, ["buggy"], n=10, deadlock_timeout_ms=100))["buggy"]
    big = await run_scenario(SCENARIO, ["buggy", "fixed"], n=40, deadlock_timeout_ms=100)
    assert 0 < small["outcomes"]["40P01"] < big["buggy"]["outcomes"]["40P01"]
    assert big["buggy"]["evidence"]["pg_stat_deadlocks"] == big["buggy"]["outcomes"]["40P01"]
    assert big["fixed"]["outcomes"] == {"ok": 40}
    assert big["fixed"]["evidence"]["pg_stat_deadlocks"] == 0
    assert all(i["held"] for r in (small, *big.values()) for i in r["invariants"])


def test_verify_runs_only_the_buggy_checkout_at_the_smaller_sizes() -> None:
    """verify runs the defaults (200 carts, both variants), then each case with buggy alone."""
    from lab.core.profiles import claims_for
    from lab.verify import run_variants, verify_plan

    plan = verify_plan([SCENARIO], QUICK)
    assert [case for _, case in plan] == ["", *CASES]
    for _, case in plan[1:]:
        claims, _ = claims_for(SCENARIO, QUICK, None, case)
        assert run_variants(SCENARIO, QUICK, claims, 1, case) == ["buggy"]
