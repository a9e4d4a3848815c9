"""The version matrix on the console: `locklab verify --matrix`."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from lab.verify.matrix import CELL, Matrix, row_verdict


def print_matrix(console: Console, matrix: Matrix) -> None:
    """claims x versions, then the verdicts that differ, measured on each version."""
    labels = [c.label for c in matrix.columns]
    table = Table(title="claims x server versions", title_justify="left")
    table.add_column("claim", no_wrap=True)
    for label in labels:
        table.add_column(label, no_wrap=True)
    table.add_column("versions", no_wrap=True)
    cells = matrix.cells()
    for cid, row in cells.items():
        verdict = row_verdict(row)
        table.add_row(
            cid,
            *(
                CELL.get(row[label], row[label]) if label in row else "[dim]-[/dim]"
                for label in labels
            ),
            "[bold]DIFFERS[/bold]" if verdict == "differs" else "same",
        )
    console.print(table)
    for label, lines in matrix.versions.items():
        console.print(f"{label}: " + "; ".join(" ".join(x.split()) for x in lines), markup=False)
    diffs = matrix.differing()
    n_diff = sum(1 for row in cells.values() if row_verdict(row) == "differs")
    console.print(f"{len(cells)} claim ids on {len(labels)} server builds; {n_diff} differ")
    for d in diffs:
        case = f" [{d['case']}]" if d["case"] else ""
        console.print(f"\n{d['id']} {d['scenario']}{case}: {d['text']}", markup=False)
        for label, c in d["by_column"].items():
            console.print(f"  {label:<14} {c['status']:<10} {c['measured']}", markup=False)
