"""The README's headline table: the documents' numbers beside this machine's, made from a
recorded verify.

The README holds the table between two marker lines. The first names the verify run it
comes from and the claims it shows, so the table can be made again and a test can see it
has not drifted::

    <!-- headline: results/reference/RUN; LABEL: SCENARIO CLAIM-ID VARIANT; ... -->
    | experiment | published | measured here | verdict |
    ...
    <!-- end headline -->

Each pick is ``label: scenario[@case] claim-id variant [k]`` and shows the first (or
k-th) verdict of that scenario (at its default settings, or the case named) with that id
and variant that quotes the documents.
`python -m lab.output.headline README.md` writes the table again from the run it names.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.output.verdicts import status_text

BEGIN = re.compile(r"^<!-- headline: (?P<run>[^;]+);(?P<picks>.*) -->$", re.M)
END = "<!-- end headline -->"


class HeadlineError(Exception):
    """The README's marker or a pick names something the run does not have."""


@dataclass(frozen=True)
class Pick:
    label: str
    scenario: str
    claim: str
    variant: str
    nth: int = 1  # of the verdicts that match, which


def picks_of(said: str) -> list[Pick]:
    """``label: scenario claim variant [k]; ...`` as picks."""
    out = []
    for part in filter(None, (p.strip() for p in said.split(";"))):
        label, _, rest = part.partition(":")
        words = rest.split()
        if len(words) not in (3, 4) or (len(words) == 4 and not words[3].isdigit()):
            raise HeadlineError(f"a pick is 'label: scenario claim variant [k]', not {part!r}")
        nth = int(words[3]) if len(words) == 4 else 1
        out.append(Pick(label.strip(), words[0], words[1], words[2], nth))
    return out


def _verdict(run: Mapping[str, Any], pick: Pick) -> Mapping[str, Any]:
    scenario, _, case = pick.scenario.partition("@")
    found = [
        v
        for s in run["scenarios"]
        if s["scenario"] == scenario and (s.get("case") or "") == case
        for v in s["verdicts"]
        if v["id"] == pick.claim and pick.variant in v["variants"] and v.get("published")
    ]
    if len(found) < pick.nth:
        what = f"{pick.scenario} {pick.claim} {pick.variant}"
        raise HeadlineError(f"{what}: {len(found)} such verdicts in the run, not {pick.nth}")
    return dict(found[pick.nth - 1])


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def table(run_dir: str, run: Mapping[str, Any], picks: Sequence[Pick]) -> str:
    """The markdown table of `picks` as `run` (the run's verdicts.json) judged them."""
    profile = {s["profile"] for s in run["scenarios"]}
    rows = [
        "| experiment | claim judged | published | measured here | verdict |",
        "|---|---|---|---|---|",
    ]
    for pick in picks:
        v = _verdict(run, pick)
        scenario, _, case = pick.scenario.partition("@")
        folder = f"{run_dir}/case-{case}" if case else run_dir
        record = f"{folder}/{scenario}.{pick.variant}.json"
        claim = f"{pick.label} ({pick.claim}, `{record}`)"
        rows.append(
            f"| {_cell(claim)} | {_cell(v.get('text', ''))} | {_cell(v['published'])} "
            f"| {_cell(v['measured'])} | {status_text(v)} |"
        )
    rows.append("")
    rows.append(f"Profile {', '.join(sorted(profile))}; verdicts in `{run_dir}/verify/`.")
    return "\n".join(rows)


def remade(readme: str, root: Path) -> str:
    """`readme` with its headline table made again from the run its marker names."""
    begin = BEGIN.search(readme)
    end = readme.find(END)
    if begin is None or end < begin.end():
        raise HeadlineError(f"no '<!-- headline: ... -->' ... '{END}' block")
    run_dir = begin["run"].strip()
    verdicts = root / run_dir / "verify" / "verdicts.json"
    if not verdicts.is_file():
        raise HeadlineError(f"{run_dir}: no verify/verdicts.json there")
    run = json.loads(verdicts.read_text())
    made = table(run_dir, run, picks_of(begin["picks"]))
    return f"{readme[: begin.end()]}\n{made}\n{readme[end:]}"


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m lab.output.headline README.md", file=sys.stderr)
        return 2
    path = Path(argv[0])
    try:
        path.write_text(remade(path.read_text(), path.parent))
    except (HeadlineError, OSError, ValueError, KeyError) as exc:
        print(f"headline: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
