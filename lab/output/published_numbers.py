"""The document's numbers beside a record: outcome counts, wall ms, attempts, figures.

Declared by the scenario (lab.core.published, kept in the record as `published_measured`) or,
for records made before that field existed, parsed from the record's published line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from lab.core.published import Measured, at_size
from lab.core.records import Record


@dataclass(frozen=True)
class Published:
    text: str
    outcomes: dict[str, int] | None
    wall_ms: float | None
    attempts: int | None
    n: int | None
    figures: Mapping[str, float] = field(default_factory=dict)  # "GETs=2739" -> {"GETs": 2739}


def parse_published(text: str, n: int | None = None) -> Published | None:
    """The document's line for a variant, as numbers: outcome counts, wall ms, attempts.

    A line may list several sizes (`... (n=200); ... (n=40)`): the one matching the run's
    n is chosen, else the first.
    """
    if not text:
        return None
    segments = [s.strip() for s in text.split(";") if s.strip()]
    chosen = segments[0]
    for s in segments:
        m = re.search(r"\(n=(\d+)\)", s)
        if m and n is not None and int(m[1]) == n:
            chosen = s
            break
    outcomes = None
    m = re.search(r"\{[^{}]*\}", chosen)
    if m:
        try:
            raw = json.loads(m[0])
            if isinstance(raw, dict) and all(isinstance(v, int) for v in raw.values()):
                outcomes = {str(k): int(v) for k, v in raw.items()}
        except ValueError:
            outcomes = None
    wall = None
    m = re.search(r"\bin\s+([\d.]+)\s*(ms|s)\b", chosen) or re.search(
        r",\s*([\d.]+)\s*(ms|s)\s*$", chosen
    )  # "in 99403 ms", or a trailing ", 597 ms"
    if m:
        wall = float(m[1]) * (1 if m[2] == "ms" else 1000)
    figures = {
        k.strip(): float(v)
        for k, v in re.findall(r"([A-Za-z][A-Za-z ]*?)\s*=\s*(\d+(?:\.\d+)?)", chosen)
    }
    attempts = int(figures["attempts"]) if "attempts" in figures else None
    m = re.search(r"\(n=(\d+)\)", chosen)
    size = int(m[1]) if m else (sum(outcomes.values()) if outcomes else None)
    return Published(chosen, outcomes, wall, attempts, size, figures)


def published_of(rec: Record, n: int | None) -> Published | None:
    """The document's run for this record's variant at size `n`: from the numbers the
    scenario declared (lab.core.published, in the record), else, for records made before
    those existed, parsed from the published line."""
    declared = [Measured.from_json(m) for m in rec.get("published_measured") or []]
    m = at_size(declared, n)
    if m is None:
        return parse_published(str(rec.get("published") or ""), n)
    return Published(
        m.text(),
        None if m.outcomes is None else dict(m.outcomes),
        m.wall_ms,
        m.attempts,
        m.n if m.n is not None else (sum(m.outcomes.values()) if m.outcomes else None),
        dict(m.figures),
    )
