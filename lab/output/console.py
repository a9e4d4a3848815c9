"""Terminal output: the documents' result lines and rich tables. Every function takes a Console."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lab.core.outcome import notation
from lab.core.records import Record
from lab.procs.netdelay import parse_rtt
from lab.servers import ServerInfo


def servers(console: Console, infos: Sequence[ServerInfo], notes: Sequence[str] = ()) -> None:
    for note in notes:
        console.print(f"[dim]{note}[/dim]", soft_wrap=True)
    for info in infos:
        console.print(f"[dim]server[/dim] {info.line()}", highlight=False, soft_wrap=True)


def headline(rec: Record) -> dict[str, Any]:
    """The counters a scenario prints beside its outcomes (older records: attempts)."""
    if "headline" in rec:
        return dict(rec["headline"])
    counters = rec.get("counters", {})
    return {"attempts": counters["attempts"]} if "attempts" in counters else {}


def measured_text(rec: Record) -> str:
    """`{"ok":4,"40P01":196} attempts=215 in 99403 ms`: outcomes, the scenario's headline
    counters, wall time, in the documents' notation."""
    return f"{_counts(rec)} in {float(rec.get('wall_ms', 0)):.0f} ms"


def result_line(rec: Record) -> str:
    """`buggy  {"ok":4,"40P01":196}  in 99403 ms`, one line per variant."""
    return f"{rec['variant']:<18} {_counts(rec)}  in {rec['wall_ms']:.0f} ms"


def _counts(rec: Record) -> str:
    extra = "".join(f" {label}={value}" for label, value in headline(rec).items())
    return f"{notation(rec.get('outcomes', {}))}{extra}"


def run_title(rec: Record) -> str:
    """The scenario and every knob its variants shared."""
    knobs = rec["knobs"]
    title = (
        f"{rec['scenario']}  n={knobs['n']} arrival={knobs['arrival']} "
        f"connect={knobs['connect']} deadlock_timeout={knobs['deadlock_timeout_ms']}ms "
        f"seed={knobs['seed']}"
    )
    if knobs.get("rtt"):  # the RTT asked, and the one each proxy really produced
        net = rec.get("evidence", {}).get("network") or {}
        per = {"pg": net, "redis": net.get("redis") or {}}  # pg's fields are network's own
        seen = [
            (s, per[s].get("actors_rtt_ms", {}).get("median", "?"))
            for s in parse_rtt(str(knobs["rtt"]))
        ]
        measured = str(seen[0][1]) if len(seen) == 1 else ", ".join(f"{s} {m}" for s, m in seen)
        title += f" rtt={knobs['rtt']}ms (measured {measured} ms)"
    return title


def _status(c: Mapping[str, Any]) -> str:
    """A verdict's status; records made before statuses existed have only `held`."""
    return str(c.get("status") or ("held" if c.get("held") else "not held"))


def results_table(console: Console, records: Sequence[Record]) -> None:
    """Variants side by side with the published numbers, invariants and claim verdicts."""
    if not records:
        return
    title = run_title(records[0])
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
            "[green]held[/green]"
            if invs and not bad
            else f"[red]{len(bad)} broken[/red]"
            if bad
            else "-"
        )
        claims = rec.get("claims", [])
        held = sum(1 for c in claims if _status(c) == "held")
        failed = sum(1 for c in claims if _status(c) == "not held")
        cl = f"{held}/{len(claims)}" if claims else "-"
        if claims:  # fitted and not reproduced are not held, and not failures either
            cl = f"[red]{cl}[/red]" if failed else f"[green]{cl}[/green]"
        measured = measured_text(rec)
        p = f"{lat.get('p50', 0):.0f}/{lat.get('p99', 0):.0f}" if lat else "-"
        table.add_row(rec["variant"], measured, p, inv, cl, rec.get("published") or "")
    console.print(table)


def claims_table(console: Console, records: Sequence[Record]) -> None:
    """Every claim verdict of a run, once each, with measured and published side by side;
    then the claims this run's settings cannot judge, and why."""
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
            held = {
                "held": "[green]held[/green]",
                "fitted": "[yellow]FITTED[/yellow]",
                "not reproduced": "[yellow]NOT REPRODUCED[/yellow]",
                "not judged": "[yellow]NOT JUDGED[/yellow]",
            }.get(_status(c), "[red]NOT HELD[/red]")
            text = escape(c["text"])
            if c.get("note"):
                text += f"\n[dim]{escape(c['note'])}[/dim]"
            table.add_row(
                c["id"], held, text, escape(c["measured"]), escape(c.get("published", ""))
            )
    if seen:
        console.print(table)
    skipped = {(c["id"], c["why"]): 0 for rec in records for c in rec.get("claims_not_judged", [])}
    if skipped:
        console.print("[dim]not judged on this run:[/dim]")
        for cid, why in skipped:
            console.print(f"[dim]  {escape(cid)}: {escape(why)}[/dim]")


# --- compare, and a progress bar for long runs (issue 4) ---------------------------------


# Redis commands the harness itself sends (connection handshakes, INFO snapshots).
REDIS_HARNESS = frozenset(
    {"hello", "client|setinfo", "client|setname", "info", "ping", "select", "auth"}
)


def evidence_text(rec: Record) -> str:
    """The server-side facts of a record in one short line: deadlocks, Redis calls, counters."""
    ev = rec.get("evidence") or {}
    parts: list[str] = []
    if "pg_stat_deadlocks" in ev:
        dl = ev.get("deadlocks") or {}
        line = f"deadlocks +{ev['pg_stat_deadlocks']}"
        if dl.get("reports"):
            line += f", {dl['reports']} reports, max cycle {dl.get('max_cycle', '?')}"
        parts.append(line)
    stats = {
        k: v for k, v in (ev.get("redis_commandstats") or {}).items() if k not in REDIS_HARNESS
    }
    if stats:
        top = sorted(stats.items(), key=lambda kv: -kv[1])[:4]
        parts.append("redis " + " ".join(f"{k.upper()}={v}" for k, v in top))
    counters = {k: v for k, v in (rec.get("counters") or {}).items() if k != "attempts"}
    if counters:
        parts.append(" ".join(f"{k}={v}" for k, v in sorted(counters.items())))
    if (ev.get("timeline") or {}).get("spans"):
        parts.append(f"timeline {len(ev['timeline']['spans'])} spans")
    return "; ".join(parts) or "-"


def attempts_text(rec: Record) -> str:
    """Attempts where retries exist: the total and, when sampled, p50/max per transfer."""
    total = (rec.get("counters") or {}).get("attempts")
    per = (rec.get("samples") or {}).get("attempts_per_transfer") or {}
    if total is None and not per:
        return "-"
    text = str(total if total is not None else per.get("sum", "?"))
    if per:
        text += f" (p50 {per.get('p50', '?'):g}, max {per.get('max', '?'):g})"
    return text


def compare_table(console: Console, records: Sequence[Record]) -> None:
    """Every variant of one scenario, same knobs, one row each, beside the published line."""
    if not records:
        return
    from rich.markup import escape

    title = run_title(records[0])
    with_attempts = any(attempts_text(r) != "-" for r in records)
    table = Table(title=escape(title), title_justify="left")
    table.add_column("variant", no_wrap=True)
    table.add_column("outcomes", overflow="fold")
    if with_attempts:
        table.add_column("attempts", overflow="fold")
    table.add_column("wall ms", justify="right")
    table.add_column("p50/p99 ms", justify="right", no_wrap=True)
    table.add_column("invariants", overflow="fold")
    table.add_column("evidence", overflow="fold")
    table.add_column("published", overflow="fold", style="dim")
    for rec in records:
        lat = rec.get("latency_ms") or {}
        invs = rec.get("invariants", [])
        bad = [i["name"] for i in invs if not i["held"]]
        if bad:
            inv = f"[red]BROKEN: {escape(', '.join(bad))}[/red]"
        else:
            inv = f"[green]held[/green] ({len(invs)})" if invs else "-"
        p = f"{lat.get('p50', 0):.0f}/{lat.get('p99', 0):.0f}" if lat else "-"
        row = [escape(rec["variant"]), escape(notation(rec["outcomes"]))]
        if with_attempts:
            row.append(attempts_text(rec))
        row += [
            f"{rec['wall_ms']:.0f}",
            p,
            inv,
            escape(evidence_text(rec)),
            escape(rec.get("published") or ""),
        ]
        table.add_row(*row)
    console.print(table)


class DelayedProgress:
    """A progress bar on `console` that appears only once the work has run for `delay` s.

    Hidden when the console is not a terminal (pipes and CI logs stay clean) and gone
    when the work ends; the bar never touches stdout.
    """

    def __init__(self, console: Console, total: int, delay: float = 1.0) -> None:
        import threading

        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
            disable=not console.is_terminal,
        )
        self.task = self.progress.add_task("", total=max(1, total))
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._timer = threading.Timer(delay, self._start)
        self._timer.daemon = True

    def _start(self) -> None:
        with self._lock:
            if not self._closed:
                self.progress.start()
                self._started = True

    def describe(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def advance(self, text: str | None = None) -> None:
        if text is not None:
            self.progress.update(self.task, description=text)
        self.progress.advance(self.task)

    def __enter__(self) -> DelayedProgress:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._closed = True
            self._timer.cancel()
            if self._started:
                self.progress.stop()
