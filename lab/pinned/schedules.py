"""Pinned runs' results, expected transcripts' names, and the schedules a command runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.core.records import PinnedRunJson
from lab.core.scenario import Check, Scenario
from lab.core.steps import ISOLATION_LEVELS, Pinned, parse_step
from lab.errors import LabError
from lab.pinned.footprint import Footprint

EXPLORE_DIR = "explore"
TRACE_DIR = "trace"
STEP_ERROR = re.compile(r"\bERROR ([0-9A-Z]{5}) ")  # a step's error line in a transcript


@dataclass
class PinnedResult:
    """One pinned run: what each session ended with, the invariants, the transcript."""

    variant: str
    schedule: tuple[str, ...]
    isolation: str
    name: str = ""  # the canonical schedule's name, "" for an explored interleaving
    outcomes: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    transcript: str = ""
    waited: list[str] = field(default_factory=list)  # steps the server showed blocked
    invalid: str = ""  # why the permutation was invalid ("" when it ran)
    invalid_at: int = -1
    evidence: dict[str, Any] = field(default_factory=dict)  # env.extra_evidence of the run
    timing: dict[str, Any] = field(default_factory=dict)  # lab.pinned.sequencer.StepClock.to_json
    # with `observe`: each granted item's footprint, by its index in the schedule
    footprints: dict[int, Footprint] = field(default_factory=dict)

    @property
    def kept(self) -> bool:
        return all(c.held for c in self.checks)

    @property
    def signature(self) -> str:
        return " ".join(f"{s}={o}" for s, o in self.outcomes.items())

    def to_json(self) -> PinnedRunJson:
        return {
            "name": self.name,
            "schedule": list(self.schedule),
            "outcomes": self.outcomes,
            "invariants": [c.to_json() for c in self.checks],
            "kept": self.kept,
            "waited": self.waited,
            "transcript": self.transcript,
            "evidence": self.evidence,
            "timing": self.timing,
        }


def expected_dir(scenario: Scenario) -> Path:
    """The scenario's folder of golden transcripts: expected/ beside its code."""
    import sys

    module = next(iter(pinned_of(scenario).code.values())).__module__
    return Path(str(sys.modules[module].__file__)).parent / "expected"


def expected_name(variant: str, schedule: str, isolation: str = "read_committed") -> str:
    """`buggy.both-read-first.out`; another level than READ COMMITTED is named too."""
    level = "" if isolation == "read_committed" else f".{isolation}"
    return f"{variant}.{schedule}{level}.out"


def pinned_of(scenario: Scenario) -> Pinned:
    if scenario.pinned is None:
        raise LabError(
            f"{scenario.id} has no pinned sessions yet; trace and explore cover: "
            + ", ".join(_pinned_ids())
        )
    return scenario.pinned


def _pinned_ids() -> list[str]:
    from scenarios import SCENARIOS

    return [s.id for s in SCENARIOS if s.pinned is not None]


def isolation_levels(scenario: Scenario, spec: str | None) -> list[str]:
    """`read_committed,serializable` -> levels; None -> the scenario's own default."""
    if spec is None:
        return [str(scenario.params.get("isolation", "read_committed"))]
    levels = list(dict.fromkeys(x.strip() for x in spec.split(",") if x.strip()))
    bad = [x for x in levels if x not in ISOLATION_LEVELS]
    if bad or not levels:
        raise LabError(f"--isolation {spec!r}: choose from {', '.join(ISOLATION_LEVELS)}")
    if "isolation" not in scenario.params and levels != ["read_committed"]:
        raise LabError(f"{scenario.id} has no isolation parameter; it runs at read_committed")
    return levels


def schedules_for(
    scenario: Scenario, variants: Sequence[str], schedule: str | None
) -> list[tuple[str, str, tuple[str, ...]]]:
    """(variant, schedule name, steps) to trace: every canonical schedule of each variant,
    the one named, or the steps given ("s1 read, s2 read, ...", checked against the
    declared steps)."""
    pinned = pinned_of(scenario)
    out: list[tuple[str, str, tuple[str, ...]]] = []
    if schedule is not None and ("," in schedule or " " in schedule.strip()):
        steps = tuple(x.strip() for x in schedule.split(",") if x.strip())
        for v in variants:
            check_steps(scenario, v, steps)
            out.append((v, "custom", steps))
        return out
    for v in variants:
        named = pinned.schedules.get(v, {})
        for name, steps in named.items():
            if schedule is None or name == schedule:
                out.append((v, name, steps))
    if not out:
        known = sorted({n for v in variants for n in pinned.schedules.get(v, {})})
        raise LabError(
            f"{scenario.id} has no schedule {schedule!r} for {', '.join(variants)} "
            f"(schedules: {', '.join(known) or 'none'}; or give steps: 's1 read, s2 read, ...')"
        )
    return out


def check_steps(scenario: Scenario, variant: str, steps: Sequence[str]) -> None:
    """Every item names a session and one of its declared steps, in the session's order."""
    declared = pinned_of(scenario).steps[variant]
    pos = dict.fromkeys(declared, 0)
    for item in steps:
        who, step = parse_step(item)
        if who not in declared:
            raise LabError(f"step {item!r}: {scenario.id} has sessions {', '.join(declared)}")
        own = declared[who]
        if step not in own:
            raise LabError(
                f"step {item!r}: {scenario.id} / {variant} {who} has steps {', '.join(own)}"
            )
        i = own.index(step)
        if i < pos[who]:
            raise LabError(f"step {item!r}: {who} takes its steps in the order {', '.join(own)}")
        pos[who] = i + 1
