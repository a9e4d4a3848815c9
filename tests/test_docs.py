"""The README and the docs site: docs/write-a-scenario.md runs as printed (its code traces
to its printed transcript); README.md stays a newcomer's page whose figures are its
recorded run's; every page in docs/ is in mkdocs.yml's nav and every relative link
resolves (those last are pure file checks, no server)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lab.cli import app
from lab.servers import Servers

ROOT = Path(__file__).parent.parent
DOC = ROOT / "docs" / "write-a-scenario.md"
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 250


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_tutorial_scenario_traces_as_the_page_shows(tmp_path: Path) -> None:
    """The page's one Python block, saved as counter.py, prints the page's transcript."""
    [code] = blocks("python")
    [expected] = blocks("text")
    path = tmp_path / "counter.py"
    path.write_text(code)
    result = CliRunner().invoke(app, ["trace", str(path), "-v", "buggy"])
    assert result.exit_code == 0, result.output
    assert result.stdout == expected


def test_a_missing_scenario_file_is_one_line(tmp_path: Path) -> None:
    """A path that is not there: one line, exit 2."""
    result = CliRunner().invoke(app, ["trace", str(tmp_path / "nope.py")])
    assert result.exit_code == 2
    assert "no such scenario file" in result.stderr


def test_the_tutorial_starts_from_new_and_its_claim_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, servers: Servers
) -> None:
    """`locklab new counter` writes ./counter.py; the page's code in its place verifies with
    the verdicts and the measured lines the page prints."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    made = runner.invoke(app, ["new", "counter"])
    assert made.exit_code == 0, made.output
    assert Path("counter.py").is_file()
    [code] = blocks("python")
    Path("counter.py").write_text(code)
    assert servers.pg is not None
    result = runner.invoke(
        app, ["verify", "counter.py", "--json", "--no-record", "--pg-dsn", servers.pg.dsn]
    )
    assert result.exit_code == 0, result.output
    verdicts = [v for r in json.loads(result.stdout)["scenarios"] for v in r["verdicts"]]
    assert [(v["id"], v["status"]) for v in verdicts] == [("CT-1", "held"), ("CT-1", "held")]
    printed = re.findall(r"`((?:buggy|fixed): read_committed: [^`]+)`", DOC.read_text())
    assert len(printed) == 2
    for line, verdict in zip(printed, verdicts, strict=True):
        assert verdict["measured"].startswith(line), (line, verdict["measured"])


def test_the_readme_is_a_newcomers_page() -> None:
    """README.md stays short (the manual is in docs/) and keeps the two commands, both
    Makefile targets."""
    text = README.read_text()
    lines = text.count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move sections to docs/"
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run-scenario", "test"):
        assert f"make {target}" in text
        assert re.search(rf"^{target}:", makefile, flags=re.M), target


def test_the_readme_output_is_its_recorded_run() -> None:
    """The run-scenario output the README shows is the record it names, line for line."""
    text = README.read_text()
    m = re.search(r"record in `(results/reference/[^`]+?)/?`\):\n\n```\n(.*?)```", text, re.S)
    assert m, "README.md: the run-scenario output and its record folder"
    folder, block = ROOT / m[1], m[2]
    shown = re.findall(r"^(\S+)\s+(\{.*?\})\s+in (\d+) ms$", block, flags=re.M)
    assert shown, block
    for variant, outcomes, ms in shown:
        [record] = folder.glob(f"*.{variant}.json")
        data = json.loads(record.read_text())
        assert json.loads(outcomes) == data["outcomes"], variant
        assert int(ms) == round(data["wall_ms"]), variant


def nav_pages() -> list[str]:
    """The .md files mkdocs.yml's nav lists (read as text: PyYAML comes with the docs extra)."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:") :]
    return re.findall(r"^\s*- (?:[^\n]*?: )?([\w./-]+\.md)\s*$", nav, flags=re.M)


def test_every_docs_page_is_in_the_nav() -> None:
    """Each page in docs/ is in mkdocs.yml's nav once, and the nav names no missing page."""
    listed = nav_pages()
    assert len(listed) == len(set(listed)), listed
    assert set(listed) == {p.name for p in DOCS.glob("*.md")}


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file, outside code blocks."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]


@pytest.mark.parametrize(
    "page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: str(p.relative_to(ROOT))
)
def test_relative_links_resolve(page: Path) -> None:
    """Every relative link points at a file that exists; a docs page links only inside
    docs/ (mkdocs --strict refuses a link out of docs_dir: name such files in code font)."""
    for target in links(page):
        resolved = (page.parent / target.split("#")[0]).resolve()
        assert resolved.exists(), f"{page.name}: {target}"
        if page.parent == DOCS:
            assert resolved.is_relative_to(DOCS.resolve()), f"{page.name}: {target}"
