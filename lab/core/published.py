"""What the documents measured, as data: one `Measured` per published run.

A scenario declares the runs the documents published per variant (``Scenario.measured``);
the line `run` and `verify` print beside the measurement is made from it
(``published_line``), claims read its numbers, the record keeps it
(``published_measured``) and the report draws it. Nothing re-parses prose; records made
before this field existed are still drawn from their text (lab.output.published_numbers).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Measured:
    """One run as a document published it."""

    n: int | None = None  # concurrent actors (carts, transfers, misses)
    outcomes: Mapping[str, int] | None = None  # outcome word or SQLSTATE -> count
    wall_ms: float | None = None
    figures: Mapping[str, float] = field(default_factory=dict)  # "attempts": 215
    label: str = ""  # what the run was, in the document's words, before its numbers

    @property
    def attempts(self) -> int | None:
        got = self.figures.get("attempts")
        return None if got is None else int(got)

    def text(self) -> str:
        """The run in one line: label, outcome counts, figures, wall time, size."""
        parts = [f"{self.label}:"] if self.label else []
        if self.outcomes is not None:
            parts.append(json.dumps(dict(self.outcomes), separators=(",", ":")))
        if self.figures:
            parts.append(", ".join(f"{k}={_num(v)}" for k, v in self.figures.items()))
        if self.wall_ms is not None:
            parts.append(f"in {_num(self.wall_ms)} ms")
        if self.n is not None:
            parts.append(f"(n={self.n})")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "outcomes": None if self.outcomes is None else dict(self.outcomes),
            "wall_ms": self.wall_ms,
            "figures": dict(self.figures),
            "label": self.label,
            "text": self.text(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Measured:
        return cls(
            n=data.get("n"),
            outcomes=data.get("outcomes"),
            wall_ms=data.get("wall_ms"),
            figures=dict(data.get("figures") or {}),
            label=str(data.get("label") or ""),
        )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def published_line(runs: Sequence[Measured]) -> str:
    """The variant's published runs as the line printed beside the measurement."""
    return "; ".join(m.text() for m in runs)


def published_lines(measured: Mapping[str, Sequence[Measured]]) -> dict[str, str]:
    return {v: published_line(runs) for v, runs in measured.items()}


def at_size(runs: Sequence[Measured], n: int | None) -> Measured | None:
    """The published run of size `n`, else the first (None when there is none)."""
    return next((m for m in runs if n is not None and m.n == n), runs[0] if runs else None)
