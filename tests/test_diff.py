"""`locklab diff` and `locklab results`: two recorded runs side by side, and the run list."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from lab.core.records import Record
from lab.core.results import write_record
from lab.output.diff import diff_runs, list_summaries
from lab.output.runs import print_diff, print_runs
from tests.test_verify import make_record

ROOT = Path(__file__).resolve().parent.parent

CLAIM = {"id": "DL-3", "text": "fixed: zero deadlocks", "variants": ["fixed"], "measured": "x"}


def run_a() -> list[Record]:
    """PostgreSQL 17 embedded: the fix holds."""
    return [
        make_record("buggy", {"ok": 1, "40P01": 39}, run_id="A", wall_ms=400.0),
        make_record(
            "fixed", {"ok": 40}, run_id="A", wall_ms=450.0, claims=[{**CLAIM, "held": True}]
        ),
    ]


def run_b() -> list[Record]:
    """PostgreSQL 15 in Docker, a smaller deadlock_timeout, the fix regressed, a new variant."""
    docker15 = {"postgresql": {"product": "postgresql", "kind": "docker", "version": "15.18"}}
    recs = [
        make_record("buggy", {"ok": 1, "40P01": 39}, run_id="B", wall_ms=800.0),
        make_record(
            "fixed",
            {"ok": 39, "40P01": 1},
            run_id="B",
            wall_ms=450.0,
            claims=[{**CLAIM, "held": False}],
        ),
        make_record("fixed-lock-first", {"ok": 40}, run_id="B"),
    ]
    for r in recs:
        r["servers"] = docker15
        r["knobs"]["deadlock_timeout_ms"] = 50
    return recs


def test_diff_pairs_records_and_names_what_changed() -> None:
    """Same outcomes are "same", a slower run shows its ratio, knob and server changes show."""
    d = diff_runs(run_a(), run_b(), "A", "B")
    pairs = {(p.scenario, p.variant): p for p in d.pairs}
    buggy = {c.field: c for c in pairs[("toy-deadlock", "buggy")].changes}
    assert not buggy["outcomes"].changed
    assert buggy["wall ms"].changed and buggy["wall ms"].note == "×2.00"
    assert (buggy["knob deadlock_timeout_ms"].a, buggy["knob deadlock_timeout_ms"].b) == (
        "100",
        "50",
    )
    servers = next(c for c in d.context if c.field == "servers")
    assert servers.changed
    assert (servers.a, servers.b) == ("postgresql 17.10 embedded", "postgresql 15.18 docker")


def test_diff_flags_a_claim_that_stopped_holding_as_regression() -> None:
    """held in A, NOT HELD in B: a regression, counted in the summary line."""
    d = diff_runs(run_a(), run_b(), "A", "B")
    fixed = {c.field: c for c in next(p for p in d.pairs if p.variant == "fixed").changes}
    claim = fixed["claim DL-3: fixed: zero deadlocks"]
    assert (claim.a, claim.b, claim.note) == ("held", "NOT HELD", "regression")
    assert fixed["outcomes"].b == '{"ok":39,"40P01":1}'
    assert len(d.regressions) == 1
    assert d.summary() == (
        "2 records in both runs, 0 only in A, 1 only in B; 1 claim verdicts changed (1 regressions)"
    )
    back = diff_runs(run_b(), run_a(), "B", "A")
    note = next(c.note for p in back.pairs for c in p.changes if c.field.startswith("claim"))
    assert note == "now holds"


@pytest.mark.parametrize(
    ("status", "word", "note"),
    [
        ("fitted", "FITTED", "now FITTED"),
        ("not reproduced", "NOT REPRODUCED", "now NOT REPRODUCED"),
        ("not judged", "NOT JUDGED", "now NOT JUDGED"),
        ("not exercised", "not exercised", "now not exercised"),
    ],
)
def test_diff_names_every_status_by_its_word_and_only_not_held_regresses(
    status: str, word: str, note: str
) -> None:
    """A claim held in A and FITTED, NOT REPRODUCED, NOT JUDGED or not exercised in B reads
    that word, not NOT HELD, and is a change of status, not a regression."""
    b = run_a()
    b[1] = make_record(
        "fixed", {"ok": 40}, run_id="B", claims=[{**CLAIM, "held": False, "status": status}]
    )
    d = diff_runs(run_a(), b, "A", "B")
    change = next(c for p in d.pairs for c in p.changes if c.field.startswith("claim"))
    assert (change.a, change.b, change.note) == ("held", word, note)
    assert d.regressions == []


def test_diff_table_without_colour_says_regression_in_words() -> None:
    """The printed diff works without colour: REGRESSION and "only in B" are words."""
    buf = StringIO()
    print_diff(
        Console(file=buf, width=160, color_system=None), diff_runs(run_a(), run_b(), "A", "B")
    )
    text = buf.getvalue()
    assert "REGRESSION" in text and "only in B" in text and "×2.00" in text
    assert "\x1b[" not in text


def test_results_lists_runs_newest_first(tmp_path: Path) -> None:
    """Each run: its scenarios, servers and claims held; an unreadable run is a row, not a crash."""
    for rec in run_a() + run_b():
        rec["run_id"] = f"2026010{1 if rec['run_id'] == 'A' else 2}-000000-aaaa"
        write_record(rec, tmp_path)
    broken = tmp_path / "20260103-000000-bad0"
    broken.mkdir()
    (broken / "x.json").write_text("{not json")
    summaries = list_summaries(tmp_path)
    assert [s["run_id"] for s in summaries] == [
        "20260103-000000-bad0",
        "20260102-000000-aaaa",
        "20260101-000000-aaaa",
    ]
    assert "not a readable record" in summaries[0]["error"]
    assert summaries[1]["scenarios"] == {"toy-deadlock": ["buggy", "fixed", "fixed-lock-first"]}
    assert (summaries[1]["claims_held"], summaries[1]["claims"]) == (0, 1)
    buf = StringIO()
    print_runs(Console(file=buf, width=200, color_system=None), summaries)
    assert "postgresql 15.18 docker" in buf.getvalue()


def test_diff_and_results_commands(tmp_path: Path) -> None:
    """The commands on recorded runs: JSON on stdout only; an unknown run id, one line, exit 2."""
    for rec in run_a() + run_b():
        write_record(rec, tmp_path)
    env = {**os.environ, "LOCKLAB_RESULTS": str(tmp_path), "NO_COLOR": "1"}

    def lab(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lab.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )

    proc = lab("diff", "A", "B", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["summary"].endswith("(1 regressions)")
    table = lab("diff", "A", "B")
    assert table.returncode == 0 and "REGRESSION" in table.stdout
    listing = lab("results", "--json")
    assert {r["run_id"] for r in json.loads(listing.stdout)} == {"A", "B"}
    bad = lab("diff", "A", "nope")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "locklab: no recorded run 'nope' (see `locklab results`)"


def test_a_temp_file_left_by_a_killed_writer_is_not_a_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_text's temp file does not end in .json: a writer SIGKILLed before its rename
    leaves nothing the readers of a run folder (glob *.json) would take for a record."""
    from lab.core import results

    temps: list[str] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        temps.append(src)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)  # what lab.core.results calls
    results.write_text(tmp_path / "s.buggy.json", "{}")
    assert len(temps) == 1 and not temps[0].endswith(".json")
