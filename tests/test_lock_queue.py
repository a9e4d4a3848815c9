"""lock-queue on real servers: SELECTs queue behind a waiting ALTER; lock_timeout prevents it."""

from __future__ import annotations

from typing import Any

import pytest

from lab.errors import LabError
from scenarios.lock_queue import ALTER_SQL, READ_SQL, ROOT_SQL, SCENARIO, TIMEOUT_TEXT
from tests.conftest import RunFn, assert_all_held

READERS = SCENARIO.params["readers"]


def sessions(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["who"]: s for s in rec["evidence"]["sessions"]}


def readers(rec: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for who, s in sessions(rec).items() if who.startswith("reader")]


def test_registered_with_the_published_tree() -> None:
    """The scenario is in the catalogue; its docstring carries the published blocking tree."""
    from scenarios import SCENARIOS

    assert SCENARIO in SCENARIOS
    published = SCENARIO.section("Published")
    assert "8123 | {}         | idle in transaction | 00:14:02" in published
    assert "8400 | {8305}     | active" in published
    assert {c.id for c in SCENARIO.claims} == {"LC-9", "LC-10"}


async def test_buggy_tree_rooted_at_the_idle_transaction(run_scenario: RunFn) -> None:
    """LC-10: root idle in transaction ← ALTER ← every SELECT; terminating the root frees all."""
    rec = (await run_scenario(SCENARIO, ["buggy"]))["buggy"]
    assert rec["outcomes"] == {"ok": 2, "queued": 2 + READERS, "terminated": 1}
    ev = rec["evidence"]
    pids = ev["pids"]
    tree = {r["pid"]: r for r in ev["blocking_tree"]}
    assert tree[pids["root"]]["blocked_by"] == []
    assert tree[pids["root"]]["state"] == "idle in transaction"
    assert tree[pids["root"]]["query"] == ROOT_SQL
    assert pids["root"] in tree[pids["alter"]]["blocked_by"]
    assert tree[pids["alter"]]["query"] == ALTER_SQL
    for r in readers(rec):
        assert tree[r["pid"]]["blocked_by"] == [pids["alter"]]
        assert tree[r["pid"]]["query"] == READ_SQL
        assert r["ended_ms"] > ev["terminated_at_ms"]
    assert ev["roots"] == [{"pid": pids["root"], "state": "idle in transaction"}]
    assert ev["blocking_tree_after"] == []
    assert_all_held(rec["claims"])


async def test_fixed_alter_gives_up_and_selects_never_queue(run_scenario: RunFn) -> None:
    """With lock_timeout the ALTER fails with 55P03; the SELECTs finish while the root is open."""
    rec = (await run_scenario(SCENARIO, ["fixed"]))["fixed"]
    assert rec["outcomes"] == {"ok": 2 + READERS, "queued": 1, "55P03": 1, "terminated": 1}
    ev = rec["evidence"]
    alter = sessions(rec)["alter"]
    assert alter["error"] == TIMEOUT_TEXT
    assert alter["ended_ms"] - alter["started_ms"] >= SCENARIO.params["ddl_lock_timeout_ms"]
    for r in readers(rec):
        assert r["blocked_by"] is None
        assert r["ended_ms"] < ev["terminated_at_ms"]
    assert [r["pid"] for r in ev["blocking_tree"]] == [ev["pids"]["root"], ev["pids"]["updater"]]
    assert_all_held(rec["claims"])


async def test_dml_beside_dml_on_one_table(run_scenario: RunFn) -> None:
    """LC-9: two UPDATEs of orders hold ROW EXCLUSIVE at once, beside the root's ROW SHARE."""
    rec = (await run_scenario(SCENARIO, ["buggy"], params={"readers": 1}))["buggy"]
    ev = rec["evidence"]
    granted = sorted(r["mode"] for r in ev["dml_locks"] if r["granted"])
    assert granted == ["RowExclusiveLock", "RowExclusiveLock", "RowShareLock"]
    assert all(d["blocked_by"] is None and d["outcome"] == "ok" for d in ev["dml"])


async def test_readers_too_early_for_the_timeout_refused(run_scenario: RunFn) -> None:
    """readers_after_ms shorter than the DDL's lock_timeout plus slack is refused: one clear line."""
    params = {"ddl_lock_timeout_ms": 500, "readers_after_ms": 300}
    with pytest.raises(LabError, match=r"readers_after_ms=300: must be at least"):
        await run_scenario(SCENARIO, ["fixed"], params=params)
