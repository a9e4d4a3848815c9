"""job-retry on real servers: backoff and a cap end a poison job; the alert finds a stuck one."""

from __future__ import annotations

from scenarios.job_retry import BACKOFF_UNIT_MS, HEALTHY_JOBS, MAX_ATTEMPTS, SCENARIO, STUCK
from tests.conftest import RunFn, claims_of


def test_registered_with_the_documents_failure_path() -> None:
    """The scenario is in the catalogue and quotes the document's cap of 5 attempts."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    assert "job.attempts >= 5" in SCENARIO.section("Published")


async def test_fixed_fails_the_poison_job_after_five_growing_gaps(run_scenario: RunFn) -> None:
    """The poison job is claimed exactly 5 times, each gap at least 2^attempt units and so longer
    than the backoff before it, then marked failed; every healthy job and the stuck one end as
    expected. Lower bounds only: a loaded machine may run any attempt late."""
    rec = (await run_scenario(SCENARIO, ["fixed"]))["fixed"]
    p = rec["evidence"]["poison"]
    assert p["status"] == "failed" and p["attempts"] == MAX_ATTEMPTS == len(p["at_ms"])
    backoffs = [2**a * BACKOFF_UNIT_MS for a in range(1, MAX_ATTEMPTS)]
    assert all(g >= b for g, b in zip(p["gaps_ms"], backoffs, strict=True))
    assert all(g > b for g, b in zip(p["gaps_ms"][1:], backoffs, strict=False))
    assert rec["outcomes"] == {"done": HEALTHY_JOBS, "failed": 1, "running": 1}


async def test_buggy_retries_without_end(run_scenario: RunFn) -> None:
    """Retried at once with no cap: never failed, more than 10 attempts (counts, not times)."""
    rec = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]
    p = rec["evidence"]["poison"]
    assert p["status"] == "pending" and p["attempts"] > 2 * MAX_ATTEMPTS
    assert rec["evidence"]["healthy"]["done"] == HEALTHY_JOBS


async def test_alert_reports_the_stuck_job_with_its_age(run_scenario: RunFn) -> None:
    """The oldest-running-job query names the stuck job, aged at least the span of the poison
    job's attempts (all after it got stuck, all before the alert; the server's clock)."""
    ev = (await run_scenario(SCENARIO, ["fixed"]))["fixed"]["evidence"]
    a, at = ev["alert"], ev["poison"]["at_ms"]
    assert a["id"] == STUCK
    assert (
        a["running_ms"]
        >= at[-1] - at[0]
        >= sum(2**i * BACKOFF_UNIT_MS for i in range(1, MAX_ATTEMPTS))
    )


async def test_every_claim_holds(run_scenario: RunFn) -> None:
    """Both variants at the defaults: every claim holds."""
    records = await run_scenario(SCENARIO)
    for rec in records.values():
        assert all(v == [True] * len(v) for v in claims_of(rec).values()), rec["claims"]
    assert sum(len(r["claims"]) for r in records.values()) == len(SCENARIO.claims)
