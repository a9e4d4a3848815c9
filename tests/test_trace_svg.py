"""`locklab trace --svg`: a pinned run drawn from the times the sequencer measured.

The live test traces checkout-deadlock's cross schedule on the real server, reads the
picture and the trace record it wrote, then has the report embed it; headless Chromium
lays the picture out and the test reads back what it drew (lanes, the 40P01, no two
labels on top of each other).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lab.cli import app
from lab.output.trace_svg import Picture, Span, Step, draw, picture_of, shorten
from lab.servers import Servers
from tests.test_html_report import CHROMIUM, _browser

SVG = "{http://www.w3.org/2000/svg}"
NOWAIT = 'ERROR 55P03 could not obtain lock on row in relation "u"'
runner = CliRunner()
# The page the browser test opens: the picture inline, and a script (the test's, not the
# picture's) that writes what Chromium laid out into the page's attributes.
MEASURE = """
<script>
window.addEventListener('load', function () {
  var svg = document.querySelector('svg'), d = document.documentElement;
  var boxes = Array.prototype.map.call(svg.querySelectorAll('text'), function (t) {
    var b = t.getBBox(); return {s: t.textContent, x: b.x, y: b.y, w: b.width, h: b.height};
  });
  var over = [];
  for (var i = 0; i < boxes.length; i++) for (var j = i + 1; j < boxes.length; j++) {
    var a = boxes[i], b = boxes[j];
    var dx = Math.min(a.x + a.w, b.x + b.w) - Math.max(a.x, b.x);
    var dy = Math.min(a.y + a.h, b.y + b.h) - Math.max(a.y, b.y);
    if (dx > 1 && dy > 2) over.push(a.s + ' / ' + b.s);
  }
  d.setAttribute('data-lanes', String(svg.querySelectorAll('g.lane').length));
  d.setAttribute('data-drawn', String(boxes.filter(function (b) { return b.w > 0; }).length));
  d.setAttribute('data-texts', String(boxes.length));
  d.setAttribute('data-overlaps', over.length ? over.join(' | ') : 'none');
  d.setAttribute('data-width', String(svg.getBBox().width));
});
</script>
"""


def _cross(tmp_path: Path, servers: Servers, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`locklab trace checkout-deadlock -v buggy --schedule cross --svg out.svg`, run."""
    assert servers.pg is not None
    monkeypatch.setenv("LOCKLAB_RESULTS", str(tmp_path / "results"))
    out = tmp_path / "out.svg"
    args = ["trace", "checkout-deadlock", "-v", "buggy", "--schedule", "cross"]
    result = runner.invoke(app, [*args, "--svg", str(out), "--pg-dsn", servers.pg.dsn])
    assert result.exit_code == 0, result.output
    assert "ERROR 40P01 deadlock detected" in result.stdout  # the transcript, as before
    return out


def test_trace_svg_draws_both_sessions_and_the_deadlock(
    tmp_path: Path, servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The picture has a lane per session, the 40P01 and its victim, and the times it was
    drawn from are the measured ones: the victim waited a deadlock_timeout at least."""
    out = _cross(tmp_path, servers, monkeypatch)
    root = ET.fromstring(out.read_text())  # one well-formed, self-contained SVG
    text = out.read_text()
    assert not re.search(r"<script|href=|url\(|@import", text)
    lanes = [g.get("data-session") for g in root.iter(f"{SVG}g") if g.get("class") == "lane"]
    assert lanes == ["s1", "s2"]
    words = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "ERROR 40P01 deadlock detected" in words
    assert words.count("deadlock victim") == 1
    assert {"lock-a", "lock-b", "commit"} <= set(words)
    assert any("UPDATE inventory" in w for w in words)  # the SQL, shortened

    [trace] = (tmp_path / "results").glob("*/trace/checkout-deadlock.json")
    record = json.loads(trace.read_text())
    assert record["kind"] == "trace" and record["svg"] == str(out)
    [run] = record["runs"]
    steps = run["timing"]["steps"]
    waited = [t for t in steps if t["waiting_ms"] is not None]
    assert {f"{t['session']} {t['step']}" for t in waited} == {"s1 lock-b", "s2 lock-a"}
    for t in steps:
        assert t["granted_ms"] <= (t["waiting_ms"] or t["granted_ms"]) <= t["ended_ms"]
    [victim] = [t for t in steps if t["result"].startswith("ERROR 40P01")]
    assert victim["ended_ms"] - victim["granted_ms"] >= record["deadlock_timeout_ms"]

    made = runner.invoke(app, ["report", trace.parent.parent.name])
    assert made.exit_code == 0, made.output
    page = (trace.parent.parent / "report.html").read_text()
    assert "Pinned runs" in page and 'class="locklab-trace"' in page
    assert 'data-session="s2"' in page and "ERROR 40P01 deadlock detected" in page


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_picture_renders_in_headless_chromium(
    tmp_path: Path, servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chromium lays the traced picture out: both lanes, every label drawn, none on top of
    another; a screenshot of the .svg file alone is a picture, not a blank page."""
    out = _cross(tmp_path, servers, monkeypatch)
    page = tmp_path / "picture.html"
    svg = out.read_text().split("?>", 1)[1]
    page.write_text(f"<!DOCTYPE html><html><body>{svg}{MEASURE}</body></html>")
    dom = _browser(["--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    got = dict(re.findall(r'data-(lanes|drawn|texts|overlaps|width)="([^"]*)"', dom.stdout))
    assert got.get("lanes") == "2", got
    assert int(got["texts"]) > 20 and got["drawn"] == got["texts"], got
    assert got["overlaps"] == "none", got["overlaps"]
    shot = tmp_path / "picture.png"
    _browser(["--window-size=1400,600", f"--screenshot={shot}", out.resolve().as_uri()], tmp_path)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_bad_svg_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """An --svg path in no folder, or a scenario with no pinned schedules: one line, exit 2,
    before any server starts."""
    from tests.test_pinned import UNPINNED

    cases = [
        (["trace", "checkout-deadlock", "--svg", str(tmp_path / "no" / "out.svg")], "no folder"),
        (["trace", "checkout-deadlock", "--svg", str(tmp_path)], "is a folder"),
        (["trace", UNPINNED, "--svg", str(tmp_path / "out.svg")], "has no pinned sessions"),
        (["explore", "lost-update", "--svg", str(tmp_path / "no" / "x.svg")], "no folder"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], lines
        assert "Traceback" not in result.output


def test_a_step_that_waited_draws_a_bar_to_its_completion() -> None:
    """A waited step is a box at its grant, a wait bar and a completion; a quick error is
    a red box; neither needs a server to draw."""
    pic = Picture(
        "schedule x   (demo / buggy, read committed)",
        ("s1", "s2"),
        (
            Step("s1", "lock", "SELECT 1 FROM t FOR UPDATE", 0.5, 1.0, None, "SELECT 1"),
            Step("s2", "lock", "SELECT 1 FROM t FOR UPDATE", 2.0, 502.0, 4.0, "SELECT 1"),
            Step("s1", "nowait", "SELECT 1 FROM u FOR UPDATE NOWAIT", 5.0, 5.5, None, NOWAIT),
        ),
        510.0,
        {"s1": "55P03", "s2": "ok"},
    )
    root = ET.fromstring(draw([pic]))
    rects = {r.get("class"): r for r in root.iter(f"{SVG}rect") if r.get("class")}
    wait = rects["wait"]
    assert float(wait.get("width") or 0) > 100  # 500 ms of waiting is drawn as such
    red = [r for r in root.iter(f"{SVG}rect") if r.get("fill") == "#c62828"]
    assert len(red) == 1  # the NOWAIT error, and no victim: nobody deadlocked
    words = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "deadlock victim" not in words and "<waiting ...>" in words
    assert any(w.startswith("ERROR 55P03") for w in words)


def test_a_frozen_holder_is_a_band_from_sigstop_to_sigcont() -> None:
    """A stage's span (A frozen between pause and wake) is drawn along A's lane with its
    length, behind A's steps."""
    pic = Picture(
        "schedule published   (lease / buggy, read committed)",
        ("A", "B"),
        (
            Step("A", "pause", "SIGSTOP", 10.0, 40.0, None, "stopped"),
            Step("B", "acquire", "SET lock <B> NX PX 30000", 45.0, 46.0, None, "OK"),
            Step("A", "wake", "SIGCONT", 300.0, 300.5, None, "running"),
        ),
        301.0,
        spans=(Span("A", "frozen", 10.5, 300.2),),
    )
    root = ET.fromstring(draw([pic]))
    [band] = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "span"]
    assert float(band.get("width") or 0) > 100
    assert "frozen 289.7 ms" in [t.text for t in root.iter(f"{SVG}text")]


def test_a_record_without_times_draws_nothing() -> None:
    """A run recorded before the sequencer kept its times has no picture (not a wrong one)."""
    assert picture_of({"outcomes": {"s1": "ok"}, "transcript": "schedule x\n"}) is None


def test_sql_is_shortened_to_whole_words_from_both_ends() -> None:
    """Long SQL keeps its head and its WHERE, as the isolation tester's readers do."""
    sql = "UPDATE inventory SET qty = qty - 1 WHERE sku = 'A-1'"
    assert shorten(sql, 36) == "UPDATE inventory … WHERE sku = 'A-1'"
    assert shorten("COMMIT", 36) == "COMMIT"
    assert len(shorten("x" * 80, 36)) == 36
