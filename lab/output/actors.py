"""What explore and trace print for actors (unchanged programs through the gate)."""

from __future__ import annotations

import re

from rich.console import Console
from rich.table import Table

from lab.gate.actors import Actor
from lab.gate.explore import Exploration, Order

# The line of an actor's stderr that says why it failed: a server's ERROR (psql), or an
# exception's class at the start of a line (Python's last traceback line, Node's
# "Error: Cannot find module", before its stack and its "Node.js v20" banner)
ERROR_LINE = re.compile(r"ERROR|^(?:[\w.]+\.)?\w*(?:Error|Exception)\b")


def _actors(console: Console, actors: list[Actor]) -> None:
    for actor in actors:
        console.print(f"  a{actor.number}: {actor.command}", markup=False)


def print_order(console: Console, order: Order, actors: list[Actor]) -> None:
    """One order's transcript, then how each actor ended and the invariant."""
    _actors(console, actors)
    for line in order.run.transcript:
        console.print(line, markup=False)
    console.print(f"invariant: {order.invariant}; {order.outcome()}", markup=False)
    for number, text in sorted(order.run.output.items()):
        lines = text.strip().splitlines()
        if order.run.exits.get(number) and lines:
            said = next((line for line in reversed(lines) if ERROR_LINE.search(line)), lines[-1])
            console.print(f"a{number} exited {order.run.exits[number]}: {said}", markup=False)


def print_exploration(console: Console, found: Exploration) -> None:
    """The outcome classes with their counts, the first broken order as a transcript."""
    if found.diverged:
        how = f"{len(found.orders) - found.sampled} explored, then {found.stopped}"
    elif not found.complete:
        how = f"stopped: {found.stopped}"
    elif found.reduced:
        how = "one of each set of orders that differ only in statements that commute"
    else:
        how = "every order"
    console.print(
        f"explore: {len(found.actors)} actors, {len(found.orders)} orders ({how}); "
        f"deadlock_timeout {found.deadlock_timeout_ms} ms on each order's database",
        markup=False,
    )
    if found.diverged:
        console.print(f"replays diverged: {found.diverged}", markup=False)
    if found.reduced and found.pruned:
        console.print(
            f"{found.pruned} more orders were cut where every held statement commuted with "
            "one explored already (--all-orders runs them all)",
            markup=False,
        )
    table = Table("outcome", "orders", box=None, pad_edge=False)
    for outcome, count in sorted(found.outcomes.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(outcome, str(count))
    console.print(table)
    if found.replays:
        console.print(
            f"{found.replays} orders ran again: a replay held other statements than the order "
            "it replayed"
            + (
                ""
                if found.diverged
                else " (the server chose otherwise: another deadlock victim, a lease that ran out on its own)"
            ),
            markup=False,
        )
    if not found.broke:
        console.print(f"kept in all {len(found.orders)} orders", markup=False)
        return
    first = found.broke[0]
    schedule = ",".join(str(a) for a in first.run.schedule)
    console.print(
        f"broke in {len(found.broke)} of {len(found.orders)} orders; the first "
        f"(trace --schedule {schedule}):",
        markup=False,
    )
    print_order(console, first, found.actors)
