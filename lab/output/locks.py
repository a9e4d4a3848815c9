"""Who blocks whom, drawn: the pg_blocking_pids() tree as rich renders it, and `locks --watch`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from rich.console import Console, Group
from rich.markup import escape
from rich.tree import Tree

from lab.load.locks import Session, roots, snapshot


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}s"


def _label(s: Session, query_width: int) -> str:
    query = " ".join(s.query.split())
    if len(query) > query_width:
        query = query[: query_width - 3] + "..."
    head = f"[bold]{s.pid}[/bold] {escape(s.user)}@{escape(s.database)} {escape(s.state)}"
    if s.wants:
        wait = f"{s.wait_event_type}/{s.wait_event}" if s.wait_event_type else "?"
        held = "; ".join(
            f"{h.pid} {'holds' if h.granted else 'is queued ahead for'} {h.mode}".rstrip()
            for h in s.holders
        )
        head += f", waits {_secs(s.wait_s)} ({escape(wait)})"
        head += f"\n[yellow]wants {escape(s.wants)}[/yellow]; {escape(held)}"
    else:
        head += f", [red]root[/red]: transaction open {_secs(s.xact_s)}"
    return f"{head}\n[dim]{escape(query)}[/dim]"


def render(sessions: Sequence[Session], query_width: int = 100) -> Group | str:
    """The blocking tree: each root, then who waits for it, and who waits for them."""
    if not sessions:
        return "no session is waiting for a lock"
    by_pid = {s.pid: s for s in sessions}
    children: dict[int, list[Session]] = {}
    for s in sessions:
        for b in s.blocked_by:
            children.setdefault(b, []).append(s)
    trees = []
    start = roots(sessions) or sessions[:1]  # a deadlock cycle has no root: start anywhere

    def grow(node: Tree, s: Session, seen: frozenset[int]) -> None:
        for c in children.get(s.pid, []):
            if c.pid in seen:
                node.add(f"{c.pid} (cycle)")
                continue
            grow(node.add(_label(c, query_width)), c, seen | {c.pid})

    for r in start:
        tree = Tree(_label(by_pid[r.pid], query_width))
        grow(tree, r, frozenset({r.pid}))
        trees.append(tree)
    waiting = sum(1 for s in sessions if s.blocked_by)
    return Group(
        f"{waiting} waiting, {len(roots(sessions))} root(s): "
        + ", ".join(str(r.pid) for r in roots(sessions)),
        *trees,
    )


def watch(console: Console, dsn: str, database: str | None, interval_s: float) -> None:
    """Redraw the tree every `interval_s` seconds until Ctrl-C (rich Live)."""
    import time

    from rich.live import Live

    with contextlib.suppress(KeyboardInterrupt), Live(console=console, auto_refresh=False) as live:
        while True:
            sessions = asyncio.run(snapshot(dsn, database))
            stamp = time.strftime("%H:%M:%S")
            live.update(
                Group(
                    f"[dim]{stamp}, every {interval_s:g} s; Ctrl-C to stop[/dim]", render(sessions)
                ),
                refresh=True,
            )
            time.sleep(interval_s)  # the refresh period: time is the subject here
