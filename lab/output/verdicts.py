"""Verdicts on the console: the claims table and the summary line of `locklab verify`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lab.verify import ScenarioVerdicts, Summary, id_key, is_gap, status_of, trials_text


def print_verdicts(console: Console, results: Sequence[ScenarioVerdicts]) -> None:
    """One table: every claim of every scenario, measured beside published."""
    table = Table(title="claims", title_justify="left", show_lines=False)
    table.add_column("scenario", overflow="fold")
    table.add_column("id", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("trials", no_wrap=True)
    table.add_column("claim", overflow="fold", ratio=3)
    table.add_column("measured", overflow="fold", ratio=3)
    table.add_column("published", overflow="fold", style="dim", ratio=2)
    for r in results:
        first = True
        name = f"{r.scenario} [{r.case}]" if r.case else r.scenario
        label = f"{escape(name)}\n[dim]{knobs_line(r.knobs)}[/dim]"
        if r.error and not r.verdicts:
            table.add_row(label, "-", "[red]ERROR[/red]", "-", "", escape(r.error), "")
        for v in sorted(r.verdicts, key=lambda v: id_key(v["id"])):
            table.add_row(
                label if first else "",
                v["id"],
                held_word(v),
                trials_text(v),
                escape(v["text"]),
                escape(str(v["measured"])),
                escape(v.get("published") or ""),
            )
            first = False
        for c in r.skipped:
            only = "+".join(c["profiles"]) or "none"
            table.add_row(
                label if first else "",
                c["id"],
                f"[dim]n/a ({only} only)[/dim]",
                "-",
                f"[dim]{escape(c['text'])}[/dim]",
                "",
                escape(c.get("published") or ""),
            )
            first = False
        table.add_section()
    console.print(table)


def print_summary(
    console: Console, summary: Summary, wall_s: float | None = None, lanes: int = 1
) -> None:
    colour = "green" if summary.ok else "red"
    took = f" in {wall_s:.1f} s" if wall_s is not None else ""
    took += f" on {lanes} lanes" if lanes > 1 and wall_s is not None else ""
    console.print(f"[{colour}]{escape(summary.line())}[/{colour}]{took}")


def knobs_line(knobs: Mapping[str, Any]) -> str:
    if not knobs:
        return ""
    line = f"n={knobs.get('n')} {knobs.get('arrival')}"
    if "deadlock_timeout_ms" in knobs:
        line += f" dt={knobs['deadlock_timeout_ms']}ms"
    if knobs.get("connect", "per-actor") != "per-actor":
        line += f" {knobs['connect']}"
    if knobs.get("rtt"):
        line += f" rtt={knobs['rtt']}ms"
    return line


def held_word(v: Mapping[str, Any]) -> str:
    """The verdict as a word (colour is a bonus: NO_COLOR and pipes keep the word); a
    claim that held on its counterfactual too says it cannot fail."""
    word = _status_word(v)
    said = str(v.get("counterfactual") or "")
    if said == "held":
        word += "\n[red]CANNOT FAIL[/red]"
    elif said.startswith("held in "):  # failed its counterfactual only in some trials
        word += f"\n[yellow]counterfactual {escape(said)}[/yellow]"
    return word


# The six words a verdict's status reads as, on every screen (console, diff, report),
# with the console's colour for each.
WORDS = {
    "held": ("held", "green"),
    "not held": ("NOT HELD", "red"),
    "fitted": ("FITTED", "yellow"),
    "not reproduced": ("NOT REPRODUCED", "yellow"),
    "not judged": ("NOT JUDGED", "yellow"),
    "not exercised": ("not exercised", "dim"),
}


def status_text(v: Mapping[str, Any]) -> str:
    """The verdict's status as its word, plain: a gap that held reads NOT REPRODUCED."""
    status = status_of(v)
    if status in ("held", "not reproduced") and is_gap(v):
        return "NOT REPRODUCED"
    return WORDS.get(status, (status, ""))[0]


def _status_word(v: Mapping[str, Any]) -> str:
    if status_of(v) in ("held", "not reproduced") and is_gap(v):
        return "[yellow]gap held, NOT REPRODUCED[/yellow]"
    word, colour = WORDS.get(status_of(v), (escape(status_of(v)), ""))
    return f"[{colour}]{word}[/{colour}]" if colour else word
