"""The report page's view model (lab.output.report_view) and its template, without a server:
verdict counts are verify's own summary, hostile text is escaped by the template, and
the package keeps its markup in lab/output/svg/ and its template in the wheel."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from lab.core.records import Record, Verdict
from lab.output.html import render
from lab.output.report_view import Counts, Page, page_view
from lab.output.scenario_view import record_verdicts
from lab.verify import ScenarioVerdicts, summarize
from tests.test_html_report import sample_run, svgs, visible_text
from tests.test_verify import make_record

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "lab" / "output"
HOSTILE = '<script>alert("x")</script> & <b>bold</b>'


def _verdict(cid: str, status: str, **extra: Any) -> Verdict:
    v: Verdict = {"id": cid, "text": f"claim {cid}", "status": status, "measured": "m"}
    v.update(extra)  # type: ignore[typeddict-item]  # gap=, fitted=: Verdict's own keys
    return v


def _verify_run() -> tuple[list[Record], list[ScenarioVerdicts]]:
    """Two scenarios' records and what verify saved for them: a case, a fitted claim, a
    gap, one not judged, one not held, and a claim of another profile."""
    recs = [
        make_record("buggy", {"ok": 1, "40P01": 9}, scenario="a", verify={"profile": "quick"}),
        make_record("fixed", {"ok": 10}, scenario="a", verify={"profile": "quick"}),
        make_record("buggy", {"ok": 3}, scenario="b", verify={"profile": "quick"}),
    ]

    def sv(scenario: str, verdicts: list[Verdict], case: str = "") -> ScenarioVerdicts:
        other = [{"id": "X-1", "text": "slow one", "profiles": ["published"]}]
        return ScenarioVerdicts(
            scenario,
            "t",
            "quick",
            {},
            {},
            1,
            verdicts,
            skipped=[] if case else other,
            case=case,
        )

    verdicts = [
        sv("a", [_verdict("A-1", "held"), _verdict("A-2", "fitted"), _verdict("A-3", "not held")]),
        sv("a", [_verdict("A-4", "held"), _verdict("A-5", "not judged")], case="slow"),
        sv("b", [_verdict("B-1", "not reproduced", gap=True), _verdict("B-2", "held")]),
    ]
    return recs, verdicts


def test_page_counts_are_verifys_summary() -> None:
    """The page's and each section's counts are lab.verify.summarize of the same verdicts
    (cases counted with their scenario), not a count of their own."""
    recs, verdicts = _verify_run()
    page = page_view(recs, "r", verdicts, generated="now")
    assert page.summary == summarize(verdicts, "quick")
    assert page.counts == Counts(held=3, not_held=1, fitted=1, not_reproduced=1, not_judged=1)
    for section in page.sections:
        own = [v for v in verdicts if v.scenario == section.id]
        assert section.summary == summarize(own, "")
    a, b = page.sections
    assert (a.counts, b.counts) == (Counts(2, 1, fitted=1, not_judged=1), Counts(1, 0, 0, 1))
    # the claims listed are verify's merged view: the case named in the text
    assert [c.text for c in a.claims if c.judged][3] == "[slow] claim A-4"
    words = [c.badge.word for c in a.claims]
    assert words == ["held", "FITTED", "NOT HELD", "held", "NOT JUDGED", "published only"]
    text = visible_text(render(page)).splitlines()
    assert "3 claims held, 1 not held" in text
    assert "(1 FITTED, 1 NOT REPRODUCED, 1 NOT JUDGED)" in text  # each by its own word
    assert "2/3 held" in text and "1/1 held" in text


def test_a_plain_run_counts_the_claims_its_records_carry() -> None:
    """No verdicts file: the records' claims, each once, summarized as verify would."""
    rec = make_record("buggy", {"ok": 2, "40P01": 8}, scenario="a")
    rec["claims"] = [_verdict("A-1", "held"), _verdict("A-2", "not held")]
    twin = make_record("fixed", {"ok": 10}, scenario="a", claims=rec["claims"][:1])
    page = page_view([rec, twin], "r", generated="now")
    assert page.summary == summarize([record_verdicts("a", [rec, twin])], "")
    assert page.counts == Counts(1, 1, 0)
    assert page.profile == "" and [c.id for c in page.sections[0].claims] == ["A-1", "A-2"]


def test_hostile_text_is_escaped_by_the_template() -> None:
    """A scenario id, title, variant, claim and invariant with markup in them show as text
    everywhere (headings, attributes, cells): autoescape, not hand-escaping."""
    rec = make_record(HOSTILE, {"ok": 1}, scenario=f'x" onmouseover="{HOSTILE}')
    rec["title"] = HOSTILE
    rec["claims"] = [_verdict("C-1", "held", text=HOSTILE, measured=HOSTILE)]
    rec["invariants"] = [{"name": HOSTILE, "held": False, "detail": HOSTILE}]
    page = render(page_view([rec], HOSTILE, generated="now"))
    outside = re.sub(r"<svg\b.*?</svg>", "", page, flags=re.S)
    assert "<script>alert" not in page and "<b>bold" not in outside
    assert 'onmouseover="' not in page  # the quote could not close the id attribute
    text = visible_text(page)
    assert text.count(HOSTILE) >= 6, text  # h1, title, meta, variant, claim, invariant...
    for chart in svgs(page):
        assert "<script" not in chart


def test_the_view_is_frozen_and_the_same_records_give_the_same_page() -> None:
    """The page view is frozen, and the same records render the same page twice."""
    recs = sample_run()
    one, two = (page_view(recs, "r", generated="g") for _ in range(2))
    assert one == two and render(one) == render(two)
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.run_id = "other"  # type: ignore[misc]
    assert isinstance(one, Page) and one.kind == "runs"


def test_a_page_with_nothing_to_count_says_so() -> None:
    """A bench --scale record alone: its own header, no claim summary."""
    page = page_view([], "b", bench={"points": [], "rounds": 3}, generated="g")
    assert page.kind == "bench" and page.bench is not None and page.bench.rounds == "3"
    assert "claims held" not in render(page)


TAG = re.compile(
    r"<\s*/?\s*(div|table|tr|td|th|p|span|section|h[1-6]|b|a|ul|li|br|html|head|body|main"
    r"|nav|script|style|meta|title)\b",
    re.I,
)


# lab/output's HTML page; the rest of the package draws on the console (rich)
HTML_MODULES = {
    "__init__.py",
    "html.py",
    "published_numbers.py",
    "report_view.py",
    "scenario_view.py",
}


def test_only_the_svg_package_writes_markup_in_python() -> None:
    """The page's markup is the template's; the page's Python has no HTML tag in it (the
    svg package draws the charts) and no rich; no module of lab/output is over 500 lines."""
    for path in sorted(OUTPUT.rglob("*.py")):
        source = path.read_text()
        assert len(source.splitlines()) <= 500, path.name
        if path.parent.name == "svg":
            assert not re.search(r"^\s*(import|from)\s+rich\b", source, re.M), path.name
        if path.name in HTML_MODULES and path.parent == OUTPUT:
            assert not re.search(r"^\s*(import|from)\s+rich\b", source, re.M), path.name
            assert not TAG.search(source), f"{path.name}: {TAG.search(source)}"


def test_the_templates_are_package_data() -> None:
    """Every file of lab/output/templates is matched by pyproject's package-data, so the
    wheel (and a non-editable install) carries the page's template."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = config["package-data"].get("lab.output", [])
    files = [p for p in (OUTPUT / "templates").rglob("*") if p.is_file()]
    assert files
    for f in files:
        rel = f.relative_to(OUTPUT).as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), rel


def test_each_claim_shows_its_counterfactual_and_its_kind() -> None:
    """A verify --counterfactual run's page has a counterfactual column: what each claim
    gave there and the kind (a run, a record edit); a page without one has no column."""
    recs, verdicts = _verify_run()
    first, second = verdicts[0].verdicts[:2]
    first["counterfactual"], first["counterfactual_kind"] = "failed", "run"
    second["counterfactual"], second["counterfactual_kind"] = "held", "record-edit"
    page = page_view(recs, "r", verdicts, generated="now")
    rows = page.sections[0].claims
    assert [r.counterfactual for r in rows[:3]] == ["failed (run)", "held (record-edit)", ""]
    text = visible_text(render(page))
    assert "counterfactual" in text and "failed (run)" in text and "held (record-edit)" in text
    plain_recs, plain = _verify_run()
    assert "counterfactual" not in visible_text(render(page_view(plain_recs, "r", plain)))
