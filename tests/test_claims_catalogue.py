"""The claims catalogue: every document id listed once, docs/claims.md generated from the code."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from lab.cli import app
from lab.core.catalogue import CLAIM_IDS, DOCUMENTS, document_ids, reached, render_markdown
from scenarios import SCENARIOS

DOC = Path(__file__).parent.parent / "docs" / "claims.md"


def test_every_document_lists_consecutive_ids() -> None:
    """DL-1..26, LC-1..35, DP-1..10: no gap, no id of an unknown document."""
    counts = {doc: len(document_ids(doc)) for doc in DOCUMENTS}
    assert counts == {"DL": 26, "LC": 35, "DP": 10}
    for doc, n in counts.items():
        assert document_ids(doc) == [f"{doc}-{i}" for i in range(1, n + 1)]
    assert sum(counts.values()) == len(CLAIM_IDS)


def test_scenarios_carry_only_known_ids() -> None:
    """A claim id a scenario carries is one of the documents' ids."""
    assert set(reached(SCENARIOS)) <= set(CLAIM_IDS)


def test_docs_claims_md_is_current() -> None:
    """docs/claims.md is what `locklab claims --markdown` renders from the code now
    (regenerate: locklab claims --markdown -o docs/claims.md)."""
    assert DOC.read_text(encoding="utf-8") == render_markdown(SCENARIOS)


def test_command_prints_the_markdown_and_the_coverage() -> None:
    """`locklab claims --markdown` prints the file's text; plain `claims` ends with one
    "N of M ids carried by a claim" line per document."""
    runner = CliRunner()
    md = runner.invoke(app, ["claims", "--markdown"])
    assert md.exit_code == 0 and md.stdout == render_markdown(SCENARIOS)
    plain = runner.invoke(app, ["claims"])
    assert plain.exit_code == 0
    for doc in DOCUMENTS:
        assert re.search(rf"{doc}: \d+ of \d+ ids carried by a claim", plain.stdout)
    assert "ids carried, by" in md.stdout and "| LC-24 |" in md.stdout
