"""upsert-idempotency on a real server: SELECT-then-INSERT and MERGE race into 23505.

Each race is forced (lab/interleave.py): nobody goes past its lookup until every other
request has looked up too or is blocked on the first one's uncommitted key.
"""

from __future__ import annotations

from typing import Any

import pytest

from lab.errors import LabError
from scenarios.upsert_idempotency import KEY, SCENARIO
from tests.conftest import RunFn, assert_all_held, claims_of


def invariants(rec: dict[str, Any]) -> dict[str, bool]:
    return {i["name"]: i["held"] for i in rec["invariants"]}


def test_registered_with_the_published_lines() -> None:
    """The scenario is in the catalogue; the document's key and its 0-row retry are quoted."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    assert KEY == "chk_7f3a"
    assert "Client retry: (0 rows)" in SCENARIO.section("Published")
    assert "DO NOTHING không trả row cũ!" in SCENARIO.published["fixed"]


async def test_defaults_every_claim_holds(run_scenario: RunFn) -> None:
    """Two racing requests, a retry, a reused key, two page views: every claim holds."""
    records = await run_scenario(SCENARIO)
    for variant in ("buggy", "buggy-merge"):
        assert records[variant]["outcomes"] == {"ok": 1, "replayed": 1, "key_reused": 1, "23505": 1}
        assert invariants(records[variant]) == {
            "one charge per idempotency key": True,
            "every page view counted": False,
        }
    fixed = records["fixed"]
    assert fixed["outcomes"] == {"ok": 1, "in_progress": 1, "replayed": 1, "key_reused": 1}
    assert all(invariants(fixed).values())
    assert fixed["evidence"]["replayed"] == fixed["evidence"]["response"]
    verdicts = [c for r in records.values() for c in r["claims"]]
    assert {c["id"] for c in verdicts} == {"LC-18", "LC-19", "LC-20", "LC-21"}
    assert_all_held(verdicts)


async def test_on_conflict_waiter_blocks_then_gets_no_row(run_scenario: RunFn) -> None:
    """The second ON CONFLICT insert waits on the first one's key, then answers 409."""
    rec = (await run_scenario(SCENARIO, ["fixed"]))["fixed"]
    waits = [e for e in rec["trace"] if e["event"] == "waits on a lock"]
    assert [(e["at"], len(e["held_by"])) for e in waits[:1]] == [("checked", 1)]
    answers = sorted(
        e["answer"] for e in rec["trace"] if e["who"].startswith("request-") and "answer" in e
    )
    assert answers == ["in_progress", "ok"]
    assert rec["counters"]["do_nothing_no_row"] == 3  # the racer, the retry, the other body
    assert rec["samples"]["views_returned"]["max"] == 2


async def test_gotchas_of_on_conflict(run_scenario: RunFn) -> None:
    """LC-19: a conflict consumes an id (gap), and one statement may not upsert a key twice."""
    rec = (await run_scenario(SCENARIO, ["fixed"]))["fixed"]
    g = rec["evidence"]["gotchas"]
    assert g["new_row_id"] > g["rows"]
    assert g["same_key_twice_in_one_statement"] == (
        "21000: ON CONFLICT DO UPDATE command cannot affect row a second time"
    )
    assert claims_of(rec)["LC-19"] == [True]


async def test_three_racers(run_scenario: RunFn) -> None:
    """-n 3: one request owns the key; the others get 23505 (buggy, MERGE) or 409 (fixed)."""
    records = await run_scenario(SCENARIO, n=3)
    assert records["buggy"]["outcomes"]["23505"] == 2
    assert records["buggy-merge"]["outcomes"]["23505"] == 2
    assert records["fixed"]["outcomes"]["in_progress"] == 2
    assert records["fixed"]["samples"]["views_returned"]["max"] == 3
    assert_all_held([c for r in records.values() for c in r["claims"]])


async def test_one_request_is_no_race(run_scenario: RunFn) -> None:
    """-n 1 is refused with a clear error: the race needs two requests."""
    with pytest.raises(LabError, match="-n 1"):
        await run_scenario(SCENARIO, ["fixed"], n=1)
