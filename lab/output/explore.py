"""An explore record on the console: the table of every interleaving, and the first failing schedule of each cell."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def print_explore(console: Console, record: Mapping[str, Any], transcripts: bool = True) -> None:
    """The matrix (variant x isolation: kept / broke / invalid), then the first failing
    schedule's transcript of each variant."""
    levels = record["isolation"]
    cells = [c for e in record["variants"].values() for c in e["by_isolation"].values()]
    only = bool(cells) and all(c.get("canonical_only") for c in cells)
    what = "canonical schedules" if only else "every interleaving"
    table = Table(title=f"{record['scenario']}: {what}", title_justify="left")
    table.add_column("variant", no_wrap=True)
    for iso in levels:
        table.add_column(iso.replace("_", " "), overflow="fold")
    for v, entry in record["variants"].items():
        cells = []
        for iso in levels:
            c = entry["by_isolation"].get(iso)
            if c is None:
                cells.append("[dim]not explored[/dim]")
                continue
            text = f"kept {c['kept']}/{c['ran']}"
            if c["broke"]:
                text += f", [red]BROKE {c['broke']}[/red]"
            if c["sqlstates"]:
                text += ", " + ", ".join(f"{k} in {n}" for k, n in c["sqlstates"].items())
            if c.get("canonical_only"):
                text += " [dim](canonical schedules only)[/dim]"
            elif "reduction" in c:
                alike = c["reduction"]["equivalent"]
                text += f" [dim](invalid {c['invalid']}, {alike} equivalent to one run, "
                text += f"of {c['interleavings']})[/dim]"
            else:
                text += f" [dim](invalid {c['invalid']} of {c['interleavings']})[/dim]"
            cells.append(text)
        table.add_row(escape(v), *cells)
    console.print(table)
    if not transcripts:
        return
    for v, entry in record["variants"].items():
        for iso in levels:
            c = entry["by_isolation"].get(iso)
            first = c and (c["first_failing"] or c["first_error"])
            if first is None:
                continue
            why = "first failing" if c and c["first_failing"] else "first with an error"
            console.print(f"\n{v} at {iso}, {why}: {', '.join(first['schedule'])}", markup=False)
            console.print(first["transcript"], markup=False, end="")
            break
