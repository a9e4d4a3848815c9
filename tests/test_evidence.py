"""Deadlock-report parsing, on log output captured from a real PostgreSQL 17 run."""

from __future__ import annotations

from pathlib import Path

from lab.load.evidence import commandstats_delta, parse_deadlocks, summarize_deadlocks

LOG = (Path(__file__).parent / "data" / "deadlock-report.log").read_text()
DB = "locklab_capture_checkout_deadlock_buggy"


def test_parses_every_report_of_the_captured_run() -> None:
    """The captured buggy run (20 carts, 19 × 40P01) has one report per victim."""
    reports = parse_deadlocks(LOG)
    assert len(reports) == 19
    assert all(r.database == DB for r in reports)


def test_four_process_cycle_with_tuple_hops() -> None:
    """The first report is the document's shape: 4 processes, 2 `ExclusiveLock on tuple` hops."""
    first = parse_deadlocks(LOG)[0]
    assert first.victim_pid == 6694
    assert first.cycle_length == 4
    assert first.tuple_hops == 2
    assert [w.mode for w in first.waits] == [
        "ShareLock",
        "ExclusiveLock",
        "ShareLock",
        "ExclusiveLock",
    ]
    assert first.waits[0].blocked_by == first.waits[1].pid  # the waits form a chain...
    assert first.waits[-1].blocked_by == first.victim_pid  # ...that closes on the victim
    assert set(first.statements) == {6694, 6692, 6701, 6695}


def test_filters_by_database() -> None:
    """Reports of another database on the same server are not counted for this run."""
    assert parse_deadlocks(LOG, database="some_other_db") == []
    assert len(parse_deadlocks(LOG, database=DB)) == 19


def test_summary_counts_cycle_lengths() -> None:
    """The record keeps the histogram of cycle lengths and the longest report."""
    s = summarize_deadlocks(parse_deadlocks(LOG))
    assert s["reports"] == 19
    assert s["cycle_lengths"] == {"2": 1, "3": 1, "4": 3, "5": 14}
    assert s["max_cycle"] == 5
    assert s["example"]["victim_pid"] in {r.victim_pid for r in parse_deadlocks(LOG)}


def test_document_two_process_report() -> None:
    """The two-process report printed in the document parses to a cycle of 2."""
    log = (
        "2026-09-01 10:00:00.000 UTC [4211] shop ERROR:  deadlock detected\n"
        "2026-09-01 10:00:00.000 UTC [4211] shop DETAIL:  Process 4211 waits for ShareLock on "
        "transaction 918273; blocked by process 4302.\n"
        "\tProcess 4302 waits for ShareLock on transaction 918270; blocked by process 4211.\n"
        "\tProcess 4211: UPDATE inventory SET qty = qty - 1 WHERE sku = 'B-2'\n"
        "\tProcess 4302: UPDATE inventory SET qty = qty - 1 WHERE sku = 'A-1'\n"
        '2026-09-01 10:00:00.000 UTC [4211] shop CONTEXT:  while updating tuple (12,7) in relation "inventory"\n'
    )
    (r,) = parse_deadlocks(log)
    assert (r.cycle_length, r.tuple_hops) == (2, 0)
    assert r.statements[4302].endswith("'A-1'")


def test_commandstats_delta() -> None:
    """Only commands whose call count changed appear, with the difference."""
    before = {"cmdstat_get": {"calls": 10}, "cmdstat_set": {"calls": 2}}
    after = {
        "cmdstat_get": {"calls": 35},
        "cmdstat_set": {"calls": 2},
        "cmdstat_eval": {"calls": 1},
    }
    assert commandstats_delta(before, after) == {"eval": 1, "get": 25}


def test_lock_wait_lines_in_log_order() -> None:
    """log_lock_waits lines, as PostgreSQL 17 writes them, become (pid, event, mode, on, ms);
    other databases' lines and other messages are skipped."""
    from lab.load.evidence import parse_lock_waits

    log = "\n".join(
        [
            "2026-12-01 08:40:01.500 UTC [301] db1 LOG:  process 301 still waiting for "
            "ShareLock on transaction 748 after 500.112 ms",
            "2026-12-01 08:40:01.500 UTC [301] db1 DETAIL:  Process holding the lock: 302. "
            "Wait queue: 301.",
            "2026-12-01 08:40:01.900 UTC [309] db2 LOG:  process 309 still waiting for "
            "ShareLock on transaction 9 after 500.000 ms",
            "2026-12-01 08:40:02.100 UTC [302] db1 LOG:  process 302 detected deadlock while "
            "waiting for ShareLock on transaction 747 after 500.071 ms",
            "2026-12-01 08:40:02.100 UTC [302] db1 ERROR:  deadlock detected",
            "2026-12-01 08:40:02.101 UTC [301] db1 LOG:  process 301 acquired ShareLock on "
            "transaction 748 after 1101.4 ms",
        ]
    )
    waits = parse_lock_waits(log, "db1")
    assert [(w["pid"], w["event"], w["on"]) for w in waits] == [
        (301, "still waiting", "transaction 748"),
        (302, "detected deadlock", "transaction 747"),
        (301, "acquired", "transaction 748"),
    ]
    assert {w["mode"] for w in waits} == {"ShareLock"}
    assert waits[-1]["after_ms"] == 1101.4
