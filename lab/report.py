"""Terminal output: the documents' result lines and rich tables. Every function takes a Console."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from lab.outcome import notation
from lab.servers import ServerInfo


def servers(console: Console, infos: Sequence[ServerInfo], notes: Sequence[str] = ()) -> None:
    for note in notes:
        console.print(f"[dim]{note}[/dim]")
    for info in infos:
        console.print(f"[dim]server[/dim] {info.line()}", highlight=False)


def result_line(rec: dict[str, Any]) -> str:
    """`buggy  {"ok":4,"40P01":196}  in 99403 ms`, the documents' notation."""
    extra = ""
    if "attempts" in rec.get("counters", {}):
        extra = f" attempts={rec['counters']['attempts']}"
    return f"{rec['variant']:<18} {notation(rec['outcomes'])}{extra}  in {rec['wall_ms']:.0f} ms"


def results_table(console: Console, records: Sequence[dict[str, Any]]) -> None:
    """Variants side by side with the published numbers, invariants and claim verdicts."""
    if not records:
        return
    first = records[0]
    knobs = first["knobs"]
    title = (
        f"{first['scenario']}  n={knobs['n']} arrival={knobs['arrival']} "
        f"connect={knobs['connect']} deadlock_timeout={knobs['deadlock_timeout_ms']}ms "
        f"seed={knobs['seed']}"
    )
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("variant")
    table.add_column("measured", overflow="fold")
    table.add_column("p50/p99 ms", justify="right")
    table.add_column("invariants")
    table.add_column("claims")
    table.add_column("published", overflow="fold", style="dim")
    for rec in records:
        lat = rec.get("latency_ms") or {}
        invs = rec.get("invariants", [])
        bad = [i for i in invs if not i["held"]]
        inv = (
            "[green]held[/green]" if invs and not bad else f"[red]{len(bad)} broken[/red]" if bad else "-"
        )
        claims = rec.get("claims", [])
        held = sum(1 for c in claims if c["held"])
        cl = f"{held}/{len(claims)}" if claims else "-"
        if claims:
            cl = f"[green]{cl}[/green]" if held == len(claims) else f"[red]{cl}[/red]"
        measured = f"{notation(rec['outcomes'])} in {rec['wall_ms']:.0f} ms"
        if "attempts" in rec.get("counters", {}):
            measured += f" attempts={rec['counters']['attempts']}"
        p = f"{lat.get('p50', 0):.0f}/{lat.get('p99', 0):.0f}" if lat else "-"
        table.add_row(rec["variant"], measured, p, inv, cl, rec.get("published") or "")
    console.print(table)


def claims_table(console: Console, records: Sequence[dict[str, Any]]) -> None:
    """Every claim verdict of a run, once each, with measured and published side by side."""
    seen: set[tuple[str, str, str]] = set()
    table = Table(title="claims", title_justify="left")
    table.add_column("id")
    table.add_column("held")
    table.add_column("claim", overflow="fold")
    table.add_column("measured", overflow="fold")
    table.add_column("published", overflow="fold", style="dim")
    for rec in records:
        for c in rec.get("claims", []):
            key = (c["id"], c["text"], c["measured"])
            if key in seen:
                continue
            seen.add(key)
            held = "[green]held[/green]" if c["held"] else "[red]NOT HELD[/red]"
            table.add_row(c["id"], held, c["text"], c["measured"], c.get("published", ""))
    if seen:
        console.print(table)
