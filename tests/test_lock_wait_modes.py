"""lock-wait-modes on a real server: waiting, NOWAIT and lock_timeout, for row and table locks.

Waiting needs an order (s1 holds while s2 asks): it is judged on pinned schedules; the
golden transcripts in scenarios/lock_wait_modes/expected/ are diffed by tests/test_pinned.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from lab.core.profiles import QUICK
from lab.core.records import InvariantJson, Record
from lab.errors import LabError
from lab.pinned import trace
from lab.servers import Servers
from lab.verify import verify_explore
from scenarios.lock_wait_modes import SCENARIO
from scenarios.lock_wait_modes.lock_wait_modes import ASKS, TIMEOUT_TEXT
from tests.conftest import RunFn, claims_of


def test_registered_with_the_published_text() -> None:
    """The scenario is in the catalogue; its docstring quotes both published error texts."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    published = " ".join(SCENARIO.section("Published").split())
    assert 'could not obtain lock on row in relation "inventory" (SQLSTATE 55P03)' in published
    assert "canceling statement due to lock timeout (55P03)" in published
    assert {c.id for c in SCENARIO.claims} == {"LC-12"}


async def test_each_mode_answers_the_blocked_ask(servers: Servers) -> None:
    """While s1 holds: plain waits until COMMIT, NOWAIT refuses with the lock's own text
    without queueing, lock_timeout refuses after waiting, for the row and the table."""
    pinned = SCENARIO.pinned
    assert pinned is not None
    runs = [(v, n, pinned.schedules[v][n]) for v in SCENARIO.variants for n in ("row-held", "table-held")]  # fmt: skip
    results = await trace(
        SCENARIO, servers, runs, ["read_committed"], run_id="test", deadlock_ms=1000
    )
    got = {(r.variant, r.name): (r.waited, r.outcomes["s2"]) for r in results}
    assert got == {
        ("buggy", "row-held"): (["s2 ask-row"], "ok"),
        ("buggy", "table-held"): (["s2 ask-table"], "ok"),
        ("fixed-nowait", "row-held"): ([], "55P03"),
        ("fixed-nowait", "table-held"): ([], "55P03"),
        ("fixed-lock-timeout", "row-held"): (["s2 ask-row"], "55P03"),
        ("fixed-lock-timeout", "table-held"): (["s2 ask-table"], "55P03"),
    }
    text = {(r.variant, r.name): r.transcript for r in results}
    assert ASKS["ask-row"][1] in text["fixed-nowait", "row-held"]
    assert ASKS["ask-table"][1] in text["fixed-nowait", "table-held"]
    assert TIMEOUT_TEXT in text["fixed-lock-timeout", "table-held"]
    assert all(c.held for r in results for c in r.checks)


async def test_explore_claims_hold(servers: Servers) -> None:
    """LC-12 on the canonical schedules and every interleaving: all held."""
    result = await verify_explore(SCENARIO, QUICK, servers, run_id="test", write=False)
    assert result is not None and result.error is None, result and result.error
    assert len(result.verdicts) == len([c for c in SCENARIO.claims if c.explore]) == 8
    assert all(v["status"] == "held" for v in result.verdicts), [
        (v["text"], v["measured"]) for v in result.verdicts if v["status"] != "held"
    ]


async def test_a_longer_lock_timeout_is_still_honoured(servers: Servers) -> None:
    """lock_timeout 600 ms, hold 900 ms: the table ask's 55P03 comes after 600 ms, not before."""
    from dataclasses import replace

    sc = replace(SCENARIO, params={**SCENARIO.params, "lock_timeout_ms": 600, "hold_ms": 900})
    assert sc.pinned is not None
    steps = sc.pinned.schedules["fixed-lock-timeout"]["table-held"]
    [res] = await trace(sc, servers, [("fixed-lock-timeout", "table-held", steps)], ["read_committed"], run_id="test", deadlock_ms=1000)  # fmt: skip
    assert res.outcomes["s2"] == "55P03"
    assert "each at or after 600 ms" in res.transcript
    assert all(c.held for c in res.checks)


async def test_load_keeps_the_answer_times(run_scenario: RunFn) -> None:
    """Holder and waiter as a load (no order forced): every 55P03 still obeys its bound;
    only the invariant claims are judged there, the pinned ones name explore. The judged
    claim is about contention, so the run must have had some: a 55P03 in each fixed variant
    (with none the claim is not exercised, and this test fails)."""
    records = await run_scenario(SCENARIO, n=4)
    for v, rec in records.items():
        assert all(i["held"] for i in rec["invariants"]), (v, rec["invariants"])
    for v in ("fixed-nowait", "fixed-lock-timeout"):
        assert records[v]["outcomes"].get("55P03", 0) > 0, (v, records[v]["outcomes"])
        assert claims_of(records[v]) == {"LC-12": [True]}, v
    why = {n["why"] for r in records.values() for n in r["claims_not_judged"]}
    assert any("locklab explore lock-wait-modes" in w for w in why)


@pytest.mark.parametrize(
    ("params", "pattern"),
    [
        ({"hold_ms": 100}, r"hold_ms=100: must be at least lock_timeout_ms"),
        ({"lock_timeout_ms": 0}, r"lock_timeout_ms=0: at least 1 ms"),
    ],
)
async def test_bad_params_one_clear_line(
    run_scenario: RunFn, params: dict[str, Any], pattern: str
) -> None:
    """A hold shorter than the timeout, or a zero timeout, is refused before any lock."""
    with pytest.raises(LabError, match=pattern):
        await run_scenario(SCENARIO, ["buggy"], params=params)


def test_load_claim_without_a_55p03_is_not_exercised() -> None:
    """A load run with no refusal held its timing invariant vacuously: not exercised, never
    held; with a refusal the same invariants are judged."""
    inv: list[InvariantJson] = [
        {"name": "lock_timeout fires at its timeout", "held": True, "detail": ""}
    ]
    for v in ("fixed-nowait", "fixed-lock-timeout"):
        [claim] = [c for c in SCENARIO.claims if c.text.startswith(f"{v}: under a load")]
        calm: dict[str, Record] = {v: {"outcomes": {"ok": 4}, "invariants": inv}}
        assert claim.judge(calm) is None
        busy: dict[str, Record] = {v: {"outcomes": {"ok": 3, "55P03": 1}, "invariants": inv}}
        assert (claim.judge(busy) or {}).get("held") is True
