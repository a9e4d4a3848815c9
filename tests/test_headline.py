"""The README's headline table: made from the recorded verify its marker names, so it
cannot drift from that run (lab/output/headline.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lab.output.headline import BEGIN, END, HeadlineError, main, remade

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, measured: str) -> str:
    """A run folder with one scenario's verdicts, as verify writes them."""
    verdict = {
        "id": "DL-3",
        "variants": ["buggy"],
        "published": '{"ok":4,"40P01":196} in 99403 ms',
        "measured": measured,
        "status": "held",
    }
    run = {
        "scenarios": [{"scenario": "s", "case": "", "profile": "published", "verdicts": [verdict]}]
    }
    folder = tmp_path / "results" / "reference" / "R"
    (folder / "verify").mkdir(parents=True)
    (folder / "verify" / "verdicts.json").write_text(json.dumps(run))
    return "results/reference/R"


def test_the_readme_table_is_the_one_its_run_gives() -> None:
    """README.md's headline table is what its marker's run and picks give, to the letter,
    and every record it names is in the repo."""
    readme = (ROOT / "README.md").read_text()
    assert remade(readme, ROOT) == readme, "run `make headline` and commit README.md"
    begin = BEGIN.search(readme)
    assert begin is not None
    block = readme[begin.end() : readme.index(END)]
    named = re.findall(r"`(results/reference/[^`]+\.json)`", block)
    assert named and all((ROOT / n).is_file() for n in named), named
    assert (ROOT / begin["run"].strip()).is_dir()


def test_a_table_edited_by_hand_is_made_again(tmp_path: Path) -> None:
    """Its self-test: a measured figure changed in the README is put back from the run;
    a pick the run does not have, or a README without the block, is one clear error."""
    run_dir = _run(tmp_path, "buggy: 197 of 200 failed")
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# x\n<!-- headline: {run_dir}; carts: s DL-3 buggy -->\nold\n<!-- end headline -->\n"
    )
    assert main([str(readme)]) == 0
    made = readme.read_text()
    assert "197 of 200 failed" in made and "| held |" in made and "old" not in made
    readme.write_text(made.replace("197 of 200", "200 of 200"))
    assert remade(readme.read_text(), tmp_path) == made
    with pytest.raises(HeadlineError, match="0 such verdicts"):
        remade(made.replace("s DL-3 buggy", "s DL-4 buggy"), tmp_path)
    with pytest.raises(HeadlineError, match="no '<!-- headline"):
        remade("# no block\n", tmp_path)
