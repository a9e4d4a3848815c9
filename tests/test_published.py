"""The documents' measured runs as data (lab.core.published): one line printed from them,
records that keep them, and a report that draws them without re-parsing prose."""

from __future__ import annotations

from lab.core.published import Measured, at_size, published_line
from lab.core.records import Record
from lab.output.report import published_of
from scenarios import get

BUGGY_200 = Measured(n=200, outcomes={"ok": 4, "40P01": 196}, wall_ms=99403)
BUGGY_40 = Measured(n=40, outcomes={"ok": 9, "40P01": 31}, wall_ms=20700)


def test_a_run_prints_as_the_document_wrote_its_numbers() -> None:
    """A published measurement prints as the document wrote it: counts, wall time, n."""
    assert BUGGY_200.text() == '{"ok":4,"40P01":196} in 99403 ms (n=200)'
    stampede = Measured(n=500, wall_ms=597, figures={"redis GETs": 2739}, label="50 ms poll")
    assert stampede.text() == "50 ms poll: redis GETs=2739 in 597 ms (n=500)"
    assert published_line((BUGGY_200, BUGGY_40)).count(";") == 1


def test_json_round_trip_and_size_choice() -> None:
    """Measured survives a JSON round trip; at_size picks the run of a size, else the first."""
    assert Measured.from_json(BUGGY_40.to_json()) == BUGGY_40
    assert at_size((BUGGY_200, BUGGY_40), 40) is BUGGY_40
    assert at_size((BUGGY_200, BUGGY_40), 7) is BUGGY_200  # no run of that size: the first
    assert at_size((), 40) is None


def test_the_report_reads_declared_numbers_and_old_records_still_draw() -> None:
    """The report reads declared published numbers, and records without them still draw."""
    new: Record = {
        "published": "prose that says nothing",
        "published_measured": [BUGGY_40.to_json()],
    }
    got = published_of(new, 40)
    assert got is not None and got.outcomes == {"ok": 9, "40P01": 31} and got.wall_ms == 20700
    old: Record = {"published": '{"ok":4,"40P01":196} in 99403 ms'}  # from before the field
    got = published_of(old, 200)
    assert got is not None and got.outcomes == {"ok": 4, "40P01": 196} and got.wall_ms == 99403


def test_scenarios_print_what_they_declare() -> None:
    """The published line of every variant with declared runs is made from them."""
    for sid in ("checkout-deadlock", "money-transfer", "cache-stampede"):
        sc = get(sid)
        assert sc.measured, sid
        for variant, runs in sc.measured.items():
            assert sc.published[variant] == published_line(runs)
