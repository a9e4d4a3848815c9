"""`locklab report`: one self-contained HTML page whose charts render in a real browser.

The page is rendered from records shaped like every scenario kind writes them (deadlocks,
attempts per transfer, Redis command counts, a lease timeline), then opened in headless
Chromium: the page's own inline check must report no script error and no blocked load.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from lab.core.records import Record
from lab.core.results import write_record
from lab.output.report import parse_published, render, timeline_chart, write_report
from tests.test_verify import make_record

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
]
BROWSER_TIMEOUT_S = 90

TIMELINE = {
    "unit": "ms",
    "spans": [
        {"who": "A", "kind": "belief", "start_ms": 1.0, "end_ms": 503.0, "label": "fence=1"},
        {"who": "A", "kind": "redis", "start_ms": 1.0, "end_ms": 301.0, "label": "expired"},
        {"who": "B", "kind": "belief", "start_ms": 350.0, "end_ms": 755.0, "label": "fence=2"},
        {"who": "B", "kind": "redis", "start_ms": 350.0, "end_ms": 503.0, "label": "deleted by A"},
        {"who": "C", "kind": "belief", "start_ms": 550.0, "end_ms": 653.0, "label": "fence=3"},
        {"who": "C", "kind": "redis", "start_ms": 550.0, "end_ms": 653.0, "label": "deleted by C"},
    ],
    "marks": [
        {"who": "A", "t_ms": 1.0, "label": "SET NX -> OK, fence=1"},
        {"who": "A", "t_ms": 1.2, "label": "stall (SIGSTOP)"},
        {"who": "A", "t_ms": 503.0, "label": "release -> 1 (plain DEL)"},
        {"who": "C", "t_ms": 550.0, "label": 'SET NX -> OK <fence=3> & "quoted"'},
    ],
}


def sample_run(run_id: str = "20260101-000000-html") -> list[Record]:
    """One record of each shape the scenarios write, plus one with almost nothing in it."""
    pub_b = '{"ok":4,"40P01":196} in 99403 ms (n=200); {"ok":9,"40P01":31} in 20.7 s (n=40)'
    return [
        make_record(
            "buggy",
            {"ok": 1, "40P01": 39},
            run_id=run_id,
            scenario="checkout-deadlock",
            published=pub_b,
            latency_ms_by_outcome={
                "40P01": {"min": 108.0, "p50": 134.0, "p95": 344.0, "p99": 445.0, "max": 445.0},
                "ok": {"min": 450.0, "p50": 450.0, "p95": 450.0, "p99": 450.0, "max": 450.0},
            },
        ),
        make_record(
            "fixed",
            {"ok": 40},
            run_id=run_id,
            scenario="checkout-deadlock",
            published='{"ok":200} in 10955 ms (n=200); {"ok":40} in 6.1 s (n=40)',
        ),
        make_record(
            "buggy",
            {"ok": 7, "40P01": 33},
            run_id=run_id,
            scenario="money-transfer",
            wall_ms=4758.0,
            published='{"ok":11,"40P01":29} attempts=215 in 434769 ms',
            counters={"attempts": 225},
            samples={
                "attempts_per_transfer": {
                    "count": 40,
                    "sum": 225,
                    "min": 2,
                    "p50": 6,
                    "p95": 6,
                    "p99": 6,
                    "max": 6,
                }
            },
        ),
        make_record(
            "fixed",
            {"ok": 40},
            run_id=run_id,
            scenario="money-transfer",
            published='{"ok":40} attempts=40 in 5841 ms',
            counters={"attempts": 40},
            samples={
                "attempts_per_transfer": {
                    "count": 40,
                    "sum": 40,
                    "min": 1,
                    "p50": 1,
                    "p95": 1,
                    "p99": 1,
                    "max": 1,
                }
            },
        ),
        make_record(
            "buggy",
            {"ok": 500},
            run_id=run_id,
            scenario="cache-stampede",
            published="500 concurrent misses: redis GETs=2739, DB calls=1, 597 ms",
            counters={"redis_get": 2598, "db_calls": 1},
            evidence={"redis_commandstats": {"get": 2598, "set": 1, "hello": 500}},
        ),
        make_record(
            "fixed",
            {"ok": 500},
            run_id=run_id,
            scenario="cache-stampede",
            counters={"redis_get": 500, "db_calls": 1},
            evidence={"redis_commandstats": {"get": 500, "set": 1, "eval": 1}},
        ),
        make_record(
            "buggy",
            {"wrote": 3},
            run_id=run_id,
            scenario="lease-gc-pause",
            latency_ms={},
            invariants_ok=False,
            evidence={"timeline": TIMELINE},
        ),
        {"run_id": run_id, "scenario": "bare", "variant": "buggy", "outcomes": {}},
    ]


def svgs(page: str) -> list[str]:
    return re.findall(r"<svg\b.*?</svg>", page, flags=re.S)


class _Text(HTMLParser):
    """The text a reader sees outside the charts: every text node, entities decoded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.skip += tag in ("svg", "style", "script")

    def handle_endtag(self, tag: str) -> None:
        self.skip -= tag in ("svg", "style", "script")

    def handle_data(self, data: str) -> None:
        if not self.skip and data.strip():
            self.parts.append(" ".join(data.split()))


def visible_text(page: str) -> str:
    """The page's text outside its SVG, style and script, one text node a line."""
    parser = _Text()
    parser.feed(page)
    return "\n".join(parser.parts)


def test_parse_published_picks_the_size_of_the_run() -> None:
    """A line listing two sizes gives the numbers of the run's n; attempts and ms are parsed."""
    line = '{"ok":4,"40P01":196} in 99403 ms (n=200); {"ok":9,"40P01":31} in 20.7 s (n=40)'
    pub = parse_published(line, 40)
    assert pub is not None and pub.outcomes == {"ok": 9, "40P01": 31} and pub.wall_ms == 20700
    pub = parse_published(line, 7)
    assert pub is not None and pub.outcomes == {"ok": 4, "40P01": 196} and pub.n == 200
    pub = parse_published('{"ok":11,"40P01":29} attempts=215 in 434769 ms')
    assert pub is not None and (pub.attempts, pub.wall_ms, pub.n) == (215, 434769, 40)
    pub = parse_published("500 misses: redis GETs=2739, DB calls=1, 597 ms")
    assert (
        pub is not None
        and pub.figures == {"redis GETs": 2739, "DB calls": 1}
        and pub.wall_ms == 597
    )
    assert parse_published("") is None


def test_page_is_self_contained_and_every_chart_is_well_formed_svg() -> None:
    """No external reference at all; every inline SVG parses as XML; all sections are there."""
    page = render(sample_run(), "20260101-000000-html")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert "Content-Security-Policy" in page
    charts = svgs(page)
    assert len(charts) >= 10
    for chart in charts:
        ET.fromstring(chart)  # raises on malformed markup or bad escaping
    for heading in (
        "Outcome counts",
        "Wall time",
        "Latency per actor",
        "Attempts per transfer",
        "Evidence from the servers",
        "Lease timeline — buggy",
        "Invariants",
        "Claims",
    ):
        assert heading in page, heading
    assert "money-transfer" in page and "bare" in page
    # escaped in the marks table (by the template) and in the chart's tooltip (by lab/output/svg/)
    assert 'SET NX -> OK <fence=3> & "quoted"' in visible_text(page).splitlines()
    assert "<fence=3>" not in page
    assert "&lt;fence=3&gt; &amp; &quot;quoted&quot;" in "".join(svgs(page))
    assert "Redis HELLO calls" not in page  # connection handshakes are harness noise


def test_published_numbers_are_drawn_beside_measured() -> None:
    """Published outcome bars, wall time, attempts and GET counts appear next to the run's."""
    page = render(sample_run(), "r")
    assert "buggy · published: 40P01 = 31 of 40" in page  # n=40 line chosen for n=40 run
    assert "buggy · published" in page and "fixed · published" in page
    assert "(2.74k)" in page  # the document's GETs beside the measured Redis GET count


def test_timeline_marks_overlap_of_two_holders() -> None:
    """A and B believe they hold between 350 and 503 ms: the chart bands that window."""
    chart = timeline_chart(TIMELINE, "t")
    assert "two holders at once: 350–503 ms" in chart
    assert "two holders at once: 550–653 ms" in chart
    assert ">1–2<" in chart  # two events 0.2 ms apart share one numbered pill
    ET.fromstring(chart)


def test_missing_evidence_is_skipped_not_fatal() -> None:
    """A record with only outcomes still renders, without the charts it has no data for."""
    page = render(
        [{"run_id": "x", "scenario": "s", "variant": "buggy", "outcomes": {"ok": 1}}], "x"
    )
    assert "Outcome counts" in page and "Lease timeline" not in page and "Attempts" not in page


def test_report_command_writes_into_the_run_folder(tmp_path: Path) -> None:
    """`locklab report RUN` writes <run>/report.html; an unknown run is one line, exit 2."""
    for rec in sample_run("r1")[:-1]:
        write_record(rec, tmp_path)
    env = {**os.environ, "LOCKLAB_RESULTS": str(tmp_path), "NO_COLOR": "1"}
    run = [sys.executable, "-m", "lab.cli", "report"]
    proc = subprocess.run(
        [*run, "r1"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r1" / "report.html").is_file()
    bad = subprocess.run(
        [*run, "r9"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "no recorded run 'r9'" in bad.stderr


def _browser(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run Chromium in its own process group with a fresh profile; kill the group on timeout."""
    assert CHROMIUM is not None
    profile = tempfile.mkdtemp(prefix="locklab-chromium-")
    proc = subprocess.Popen(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=BROWSER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"chromium did not finish in {BROWSER_TIMEOUT_S} s: {err[-2000:]}")
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_report_renders_in_headless_chromium_without_errors(tmp_path: Path) -> None:
    """Chromium loads the page, runs its check script, reports no error; a screenshot is taken."""
    for rec in sample_run("r2")[:-1]:
        write_record(rec, tmp_path)
    page = write_report(str(tmp_path / "r2"))
    url = page.resolve().as_uri()
    dom = _browser(["--virtual-time-budget=5000", "--dump-dom", url], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-rendered="ok"' in dom.stdout, dom.stderr[-2000:]
    assert 'data-errors="none"' in dom.stdout, re.findall(r'data-errors="[^"]*"', dom.stdout)
    count = re.search(r'data-svg-count="(\d+)"', dom.stdout)
    assert count is not None and int(count[1]) == len(svgs(page.read_text()))
    console = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    assert "Refused to" not in dom.stderr  # nothing the Content-Security-Policy had to block

    shot = tmp_path / "report.png"
    _browser(["--window-size=1100,3000", f"--screenshot={shot}", url], tmp_path)
    assert shot.is_file() and shot.stat().st_size > 20_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_claims_a_run_could_not_judge_are_listed_with_why() -> None:
    """A run record's claims_not_judged shows as a row with its reason, not as NOT HELD."""
    rec = make_record("buggy", {"ok": 2, "40P01": 8})
    rec["claims_not_judged"] = [
        {"id": "DL-4", "text": "long cycles", "variants": ["buggy"],
         "why": "made for the published settings; this run changed them (locklab verify)"}
    ]  # fmt: skip
    page = render([rec], "r")
    assert "not judged here" in page and "made for the published settings" in page
    assert "NOT HELD" not in page


def test_measured_cells_carry_the_scenarios_headline_counters() -> None:
    """The page's measured text is the terminal's: GETs and DB calls beside the outcomes."""
    rec = make_record("buggy", {"ok": 500}, scenario="cache-stampede", wall_ms=545.0)
    rec["headline"] = {"GETs": 2749, "DB calls": 1}
    page = render([rec], "r")
    assert '{"ok":500} GETs=2749 DB calls=1 in 545 ms' in visible_text(page).splitlines()
    assert '{"ok":500}' not in page  # the quotes escaped, in text as in attributes


def _scale_record() -> dict[str, Any]:
    """A `bench --scale` record in the shape lab/load/bench.py writes (figures of one run here)."""
    rows = [(50, "direct", 1.067), (200, "direct", 1.044), (1000, "pgbouncer (transaction)", 1.131)]
    return {
        "rounds": 3,
        "pgbench": "pgbench (PostgreSQL) 17.10",
        "points": [
            {
                "n": n,
                "via": via,
                "lab_ms": [100.0 * ratio],
                "pgbench_ms": [100.0],
                "lab_median_ms": 100.0 * ratio,
                "pgbench_median_ms": 100.0,
                "ratio": ratio,
                "target_ratio": 1.05 if n == 200 else 1.10,
            }
            for n, via, ratio in rows
        ],
    }


def test_a_bench_scale_run_is_drawn_as_its_curve(tmp_path: Path) -> None:
    """`locklab report` of a `bench --scale` run (no scenario records): one point per n, the
    point above its target marked, the table beside it; the SVG parses."""
    bench = tmp_path / "b1" / "bench"
    bench.mkdir(parents=True)
    (bench / "scale.json").write_text(json.dumps(_scale_record()))
    env = {**os.environ, "LOCKLAB_RESULTS": str(tmp_path), "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "lab.cli", "report", "b1"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "b1" / "report.html").read_text()
    [chart] = [c for c in svgs(page) if "lab / pgbench at each n" in c]
    root = ET.fromstring(chart)
    ns = "{http://www.w3.org/2000/svg}"
    circles = root.findall(f"{ns}circle")
    assert len(circles) == 3
    assert [c.get("fill") for c in circles] == ["#1565c0", "#1565c0", "#c62828"]  # 1.131 > 1.10
    assert "n=1000: lab 113 ms, pgbench 100 ms, ratio 1.131 (ABOVE 1.10)" in chart
    assert "<td>1.044</td><td>1.05</td><td>within</td>" in page
    assert "pgbouncer (transaction)" in page
    assert "claims held" not in page  # a bench run has no claims to count
