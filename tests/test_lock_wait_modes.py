"""lock-wait-modes on real servers: waiting, NOWAIT and lock_timeout, for row and table locks."""

from __future__ import annotations

from typing import Any

import pytest

from lab.errors import LabError
from scenarios.lock_wait_modes import LOCKS, SCENARIO, TIMEOUT_TEXT
from tests.conftest import RunFn, assert_all_held, claims_of

HOLD_MS = SCENARIO.params["hold_ms"]
LOCK_TIMEOUT_MS = SCENARIO.params["lock_timeout_ms"]


def attempts(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["lock"]: a for a in rec["evidence"]["attempts"]}


def test_registered_with_the_published_text() -> None:
    """The scenario is in the catalogue; its docstring quotes both published error texts."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    published = " ".join(SCENARIO.section("Published").split())
    assert 'could not obtain lock on row in relation "inventory" (SQLSTATE 55P03)' in published
    assert "canceling statement due to lock timeout (55P03)" in published
    assert {c.id for c in SCENARIO.claims} == {"LC-12"}


async def test_defaults_every_mode_for_row_and_table(run_scenario: RunFn) -> None:
    """LC-12 at the defaults: waiting gets the lock after the hold; both fixes fail with 55P03."""
    records = await run_scenario(SCENARIO)
    buggy, nowait, timed = (records[v] for v in SCENARIO.variants)
    assert buggy["outcomes"] == {"ok": 2}
    assert nowait["outcomes"] == {"55P03": 2}
    assert timed["outcomes"] == {"55P03": 2}
    for lock in LOCKS:
        assert attempts(buggy)[lock]["blocked_by_holder"]
        assert attempts(buggy)[lock]["wait_ms"] >= HOLD_MS
        assert attempts(nowait)[lock]["error"] == LOCKS[lock][2]
        assert not attempts(nowait)[lock]["blocked_by_holder"]
        assert attempts(timed)[lock]["error"] == TIMEOUT_TEXT
        assert attempts(timed)[lock]["wait_ms"] >= LOCK_TIMEOUT_MS
    verdicts = [c for r in records.values() for c in r["claims"]]
    assert len({c["text"] for c in verdicts}) == len(SCENARIO.claims)
    assert_all_held(verdicts)


async def test_trace_orders_hold_block_commit_answer(run_scenario: RunFn) -> None:
    """buggy, row only: the holder locks, the server shows the waiter blocked, commit, answer."""
    rec = (await run_scenario(SCENARIO, ["buggy"], params={"locks": "row"}))["buggy"]
    steps = [(e["who"], e["event"]) for e in rec["trace"]]
    assert steps == [
        ("holder", "holds the row lock"),
        ("server", "waiter blocked"),
        ("holder", "commit"),
        ("waiter", "ok"),
    ]
    assert claims_of(rec)["LC-12"] == [True]


async def test_longer_lock_timeout_is_still_honoured(run_scenario: RunFn) -> None:
    """Table lock, lock_timeout 600 ms: the 55P03 comes after 600 ms, not before."""
    params = {"locks": "table", "lock_timeout_ms": 600, "hold_ms": 900}
    rec = (await run_scenario(SCENARIO, ["fixed-lock-timeout"], params=params))[
        "fixed-lock-timeout"
    ]
    assert rec["outcomes"] == {"55P03": 1}
    assert attempts(rec)["table"]["wait_ms"] >= 600
    assert claims_of(rec)["LC-12"] == [True]


@pytest.mark.parametrize(
    ("params", "pattern"),
    [
        ({"hold_ms": 100}, r"hold_ms=100: must be at least lock_timeout_ms"),
        ({"locks": "row,column"}, r"locks='row,column'"),
    ],
)
async def test_bad_params_one_clear_line(
    run_scenario: RunFn, params: dict[str, Any], pattern: str
) -> None:
    """A hold shorter than the timeout, or an unknown lock kind, is refused before any lock."""
    with pytest.raises(LabError, match=pattern):
        await run_scenario(SCENARIO, ["buggy"], params=params)
