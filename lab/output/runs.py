"""Recorded runs and their differences on the console: `locklab results` and `locklab diff`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lab.output.diff import RunDiff


def print_runs(console: Console, summaries: Sequence[Mapping[str, Any]]) -> None:
    if not summaries:
        console.print("no recorded runs yet (`locklab run <scenario>` writes one under results/)")
        return
    table = Table(title="recorded runs (newest first)", title_justify="left")
    for col in ("run", "started", "scenarios", "profile", "servers", "claims held", "commit"):
        table.add_column(col, overflow="fold")
    for s in summaries:
        if "error" in s:
            table.add_row(s["run_id"], "", f"[red]{escape(s['error'])}[/red]", "", "", "", "")
            continue
        scen = ", ".join(f"{k} ({len(v)})" for k, v in s["scenarios"].items())
        held = f"{s['claims_held']}/{s['claims']}" if s["claims"] else "-"
        if s["claims"]:
            colour = "green" if s["claims_held"] == s["claims"] else "red"
            held = f"[{colour}]{held}[/{colour}]"
        table.add_row(
            s["run_id"],
            s["started_at"].replace("T", " ").replace("+00:00", "Z"),
            escape(scen),
            s.get("profile") or "-",
            escape(s["servers"]),
            held,
            s.get("git_commit") or "-",
        )
    console.print(table)


def print_diff(console: Console, d: RunDiff, *, show_all: bool = False) -> None:
    """The context (servers, commit) then one table of what changed per scenario × variant."""
    ctx = Table(title=f"A = {d.run_a}   B = {d.run_b}", title_justify="left", show_header=True)
    for col in ("", "A", "B"):
        ctx.add_column(col, overflow="fold")
    for c in d.context:
        mark = "[yellow]≠[/yellow] " if c.changed else "  "
        ctx.add_row(mark + c.field, escape(c.a), escape(c.b))
    console.print(ctx)
    table = Table(title="per scenario × variant", title_justify="left")
    table.add_column("record", overflow="fold")
    table.add_column("field", overflow="fold")
    table.add_column("A", overflow="fold")
    table.add_column("B", overflow="fold")
    table.add_column("change", overflow="fold")
    always = {"outcomes", "wall ms"}
    for p in d.pairs:
        label = f"{p.scenario} {p.variant}"
        if not (p.in_a and p.in_b):
            where = "only in A" if p.in_a else "only in B"
            table.add_row(escape(label), "", "", "", f"[yellow]{where}[/yellow]")
            table.add_section()
            continue
        first = True
        for c in p.changes:
            if not (show_all or c.changed or c.field in always):
                continue
            note = c.note
            if note == "regression":
                note = "[red]REGRESSION[/red]"
            elif note == "now holds":
                note = "[green]now holds[/green]"
            elif not c.changed:
                note = "[dim]same[/dim]"
            table.add_row(
                escape(label) if first else "", escape(c.field), escape(c.a), escape(c.b), note
            )
            first = False
        table.add_section()
    console.print(table)
    colour = "red" if d.regressions else "default"
    console.print(f"[{colour}]{escape(d.summary())}[/{colour}]")
