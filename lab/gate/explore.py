"""Explore unchanged programs: every order of their statements, each on a fresh database.

Exploration is stateless: an order is a list of choices (which held statement goes at
each point), replayed from the start on a fresh copy of the database (the setup applied
to a template once, `CREATE DATABASE ... TEMPLATE` per order). The orders are enumerated
depth first: after an order, the last point that had an untried candidate takes the next
one. So an actor whose next statement depends on what it read is explored as it runs.

A replay that holds other statements than the first run did at the same point (a timer,
`SKIP LOCKED`, a random token) cannot be explored this way: explore says which actor's
statement differed, in one line, and goes on with sampled orders (lab/gate/sample.py),
counted as sampled, never as every order; `exhaustive` refuses instead.

Orders that differ only by swapping statements that commute are run once (sleep sets
over the footprints the server shows, lab/gate/reduce.py); `all_orders` runs every one.

After every order the invariant (SQL that returns one boolean row) is read on that
order's database. An order is kept when it reads true and every actor exited 0; else it
broke (a psql script with ON_ERROR_STOP that got a 40P01 exits 3). An actor's outcome is
its exit status and the SQLSTATEs the gate saw it receive.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lab.errors import LabError
from lab.gate.actors import Actor
from lab.gate.dsn import upstream_of
from lab.gate.order import LEASE, Choose, Decision, OrderRun, run_order
from lab.gate.reduce import Redundant, SleepSets
from lab.gate.sample import SAMPLES, sampler, session_of
from lab.gate.workspace import RedisPlan, Workspace, workspace
from lab.pinned.footprint import Footprint

DEADLOCK_TIMEOUT_MS = 100  # on the explored databases: a deadlocking order costs this wait


REPLAYS = 3  # tries of one order whose replay held other statements


class Diverged(LabError):
    """A replay held other statements than the order it replays."""


@dataclass
class Order:
    """One explored order and how it ended."""

    run: OrderRun
    kept: bool
    invariant: str  # what the invariant read, for the transcript

    def outcome(self) -> str:
        """'kept' or 'broke', then each actor's end: a1=0 a2=3:40P01."""
        ends = []
        for number, status in sorted(self.run.exits.items()):
            codes = sorted(set(self.run.errors.get(number, [])))
            ends.append(f"a{number}={status}" + (":" + ",".join(codes) if codes else ""))
        return ("kept " if self.kept else "broke ") + " ".join(ends)


@dataclass
class Exploration:
    """What explore found over the orders it ran."""

    actors: list[Actor]
    orders: list[Order] = field(default_factory=list)
    complete: bool = False  # every order was run
    stopped: str = ""  # why it stopped before that, in one line
    deadlock_timeout_ms: int = DEADLOCK_TIMEOUT_MS
    replays: int = 0  # orders run again because a replay held other statements
    reduced: bool = True  # orders equivalent to one run are skipped (lab/gate/reduce.py)
    pruned: int = 0  # orders cut where every held statement slept
    diverged: str = ""  # which actor's statement differed between replays, if one did
    sampled: int = 0  # orders run by sampling after that (lab/gate/sample.py)
    seed: int = 1  # of the sampling

    @property
    def outcomes(self) -> Counter[str]:
        return Counter(o.outcome() for o in self.orders)

    @property
    def broke(self) -> list[Order]:
        return [o for o in self.orders if not o.kept]

    def as_json(self) -> dict[str, object]:
        first = self.broke[0] if self.broke else None
        return {
            "actors": [a.command for a in self.actors],
            "orders": len(self.orders),
            "complete": self.complete,
            "stopped": self.stopped or None,
            "kept": len(self.orders) - len(self.broke),
            "broke": len(self.broke),
            "outcomes": dict(sorted(self.outcomes.items())),
            "deadlock_timeout_ms": self.deadlock_timeout_ms,
            "replays": self.replays,
            "reduction": "sleep sets" if self.reduced else "none",
            "pruned": self.pruned,
            "diverged": self.diverged or None,
            "sampled": self.sampled,
            "seed": self.seed,
            "first_broken": None
            if first is None
            else {
                "schedule": first.run.schedule,
                "transcript": first.run.transcript,
                "invariant": first.invariant,
            },
        }


def replay(prefix: Sequence[int], known: Sequence[list[str]] = ()) -> Choose:
    """Choose as `prefix` says, then the first candidate. A replay that holds fewer
    statements than `prefix` chose among is Diverged, named by what `known` (the
    candidates an earlier order held at each point) had there."""
    went: list[str] = []  # the statement chosen at each point of the prefix so far

    def choose(depth: int, decision: Decision, steps: Sequence[Footprint]) -> int:
        if depth >= len(prefix):
            return 0
        if prefix[depth] >= len(decision.candidates):
            held = decision.candidates
            before = known[depth] if depth < len(known) else []
            raise Diverged(
                _differs(before, held, went)
                or f"statement {depth + 1} differs between replays: {len(held)} held {held} "
                "where an earlier order had more"
            )
        went.append(decision.candidates[prefix[depth]])
        return prefix[depth]

    return choose


def reduced(search: SleepSets, prefix: Sequence[int], known: Sequence[list[str]] = ()) -> Choose:
    """Replay `prefix`, then the first statement neither explored nor asleep."""
    check = replay(prefix, known)
    pick = search.chooser(prefix)

    def choose(depth: int, decision: Decision, steps: Sequence[Footprint]) -> int:
        check(depth, decision, steps)  # a replay that holds fewer: Diverged
        return pick(depth, decision.candidates, decision.actors, steps)

    return choose


def following(schedule: Sequence[int | str]) -> Choose:
    """Choose the held statement of the schedule's next actor (a trace); 't1': actor 1
    held until its Redis lease runs out."""

    def choose(depth: int, decision: Decision, steps: Sequence[Footprint]) -> int:
        if depth >= len(schedule):
            raise LabError(
                f"the schedule ends after {len(schedule)} statements and more are waiting"
            )
        want = schedule[depth]
        for k, (actor, label) in enumerate(zip(decision.actors, decision.candidates, strict=True)):
            if isinstance(want, str) and actor == int(want[1:]) and LEASE in label:
                return k
            if actor == want and LEASE not in label:
                return k
        waiting = ", ".join(sorted({f"a{a}" for a in decision.actors}))
        raise LabError(
            f"statement {depth + 1} of the schedule is actor {schedule[depth]}'s, "
            f"but only {waiting} has a statement waiting"
        )

    return choose


def next_prefix(run: OrderRun) -> list[int] | None:
    """Depth first: the last point with an untried candidate takes the next one."""
    for depth in range(len(run.decisions) - 1, -1, -1):
        decision = run.decisions[depth]
        if decision.chosen + 1 < len(decision.candidates):
            return [d.chosen for d in run.decisions[:depth]] + [decision.chosen + 1]
    return None


def _bounded(found: Exploration, search: SleepSets, max_orders: int) -> str:
    """What --max left unexplored, honestly: every order has one at least per statement
    not tried at a point of the last one; the reduction may yet find some equivalent."""
    ran = len(found.orders)
    if not found.reduced:
        left = sum(len(d.candidates) - 1 - d.chosen for d in found.orders[-1].run.decisions)
        return f"--max {max_orders} reached: explored {ran} of at least {ran + left} orders"
    return (
        f"--max {max_orders} reached: explored {ran} orders; {search.left()} statements "
        "not yet tried at points reached (each leads to an order unless it proves "
        "equivalent to one run)"
    )


def diverged(known: Sequence[list[str]], run: OrderRun, prefix: Sequence[int]) -> str | None:
    """Which actor's statement a replay held otherwise than the order it replays."""
    for depth in range(min(len(prefix), len(known), len(run.decisions))):
        went = [d.candidates[d.chosen] for d in run.decisions[:depth]]
        why = _differs(known[depth], run.decisions[depth].candidates, went)
        if why is not None:
            return why
    return None


def _differs(before: Sequence[str], now: Sequence[str], went: Sequence[str]) -> str | None:
    """Which actor's statement is held otherwise at one point (`before`: what an earlier
    order held there, `now`: what this replay holds, `went`: the statements chosen up to
    there), in one line; None when they are the same or nothing was held before."""
    if list(before) == list(now) or not before:
        return None
    changed = next((b for b in before if b not in now), before[0])
    session = session_of(changed)
    nth = 1 + sum(session_of(label) == session for label in went)
    instead = next((c for c in now if session_of(c) == session), "nothing")
    return (
        f"actor {session.partition('.')[0][1:]}'s statement {nth} differs between "
        f"replays: {instead!r} where an earlier order held {changed!r}"
    )


async def explore(
    dsn: str,
    actors: Sequence[Actor],
    setup: str,
    invariant: str,
    *,
    max_orders: int | None = None,
    first: bool = False,
    all_orders: bool = False,
    exhaustive: bool = False,
    seed: int = 1,
    deadlock_timeout_ms: int = DEADLOCK_TIMEOUT_MS,
    cwd: Path | None = None,
    progress: Callable[[Order], None] | None = None,
    redis: RedisPlan | None = None,
    invariant_cmd: str = "",
) -> Exploration:
    """Run every order of the actors' statements but those equivalent to one already run
    (every one with `all_orders`), or up to `max_orders`, or to the first broken one with
    `first`. When replays diverge: sampled orders from then on (`seed`), up to `max_orders`
    in all or SAMPLES more; with `exhaustive`, a LabError instead."""
    found = Exploration(list(actors), deadlock_timeout_ms=deadlock_timeout_ms, seed=seed)
    found.reduced = not all_orders
    search = SleepSets()
    async with workspace(dsn, setup, invariant, deadlock_timeout_ms, redis, invariant_cmd) as ws:
        prefix: list[int] | None = []
        known: list[list[str]] = []
        while prefix is not None:
            if max_orders is not None and len(found.orders) >= max_orders:
                found.stopped = _bounded(found, search, max_orders)
                return found
            choose = replay(prefix, known) if all_orders else reduced(search, prefix, known)
            try:
                order = await _replayed(ws, actors, prefix, known, found, cwd, choose)
            except Redundant:
                found.pruned += 1
                prefix = search.next_prefix()
                continue
            except Diverged as exc:
                if exhaustive:
                    raise LabError(f"--exhaustive: {exc}") from None
                found.diverged = str(exc)
                left = SAMPLES if max_orders is None else max_orders - len(found.orders)
                await _sample(ws, actors, found, cwd, left, first, progress)
                return found
            found.orders.append(order)
            if progress is not None:
                progress(order)
            known = [d.candidates for d in order.run.decisions]
            if first and not order.kept:
                found.stopped = "--first: stopped at the first broken order"
                return found
            if all_orders:
                prefix = next_prefix(order.run)
            else:
                search.finished(order.run.footprints)
                prefix = search.next_prefix()
    found.complete = True
    return found


async def _sample(
    ws: Workspace,
    actors: Sequence[Actor],
    found: Exploration,
    cwd: Path | None,
    budget: int,
    first: bool,
    progress: Callable[[Order], None] | None,
) -> None:
    """Up to `budget` sampled orders (lab/gate/sample.py), after the replays diverged."""
    rng = random.Random(found.seed)
    length = max((len(o.run.decisions) for o in found.orders), default=1)
    how = f"PCT, seed {found.seed}"
    while found.sampled < budget:
        order = await _one_order(ws, actors, sampler(rng, length), cwd)
        found.orders.append(order)
        found.sampled += 1
        length = max(length, len(order.run.decisions))
        if progress is not None:
            progress(order)
        if first and not order.kept:
            found.stopped = f"--first: stopped at the first broken order, sampled ({how})"
            return
    found.stopped = f"sampled {found.sampled} orders ({how}): not every order was run"


async def _replayed(
    ws: Workspace,
    actors: Sequence[Actor],
    prefix: list[int],
    known: list[list[str]],
    found: Exploration,
    cwd: Path | None,
    choose: Choose,
) -> Order:
    """The order `prefix` leads to. A replay that holds other statements than the order it
    replays is run again (the server may choose otherwise: which session a deadlock
    aborts is whose timer fires first), up to REPLAYS times, then Diverged."""
    for attempt in range(REPLAYS):
        try:
            order = await _one_order(ws, actors, choose, cwd)
            why = diverged(known, order.run, prefix)
        except Diverged as exc:
            why = str(exc)
        if why is None:
            return order
        found.replays += 1
        if attempt == REPLAYS - 1:
            raise Diverged(f"{why}; the same in {REPLAYS} replays")
    raise AssertionError("unreachable")


async def _one_order(
    ws: Workspace,
    actors: Sequence[Actor],
    choose: Choose,
    cwd: Path | None,
) -> Order:
    """Run one order on a fresh copy of the template and judge it."""
    async with ws.database() as (name, observer):
        run = await run_order(
            upstream_of(ws.dsn),
            observer,
            actors,
            user=ws.user,
            database=name,
            passfile=ws.passfile,
            choose=choose,
            cwd=cwd,
            redis=ws.redis,
        )
        held, read = await ws.check(observer, name, cwd)
    return Order(run, held and not any(run.exits.values()), read)


async def trace(
    dsn: str,
    actors: Sequence[Actor],
    setup: str,
    invariant: str,
    schedule: Sequence[int | str],
    *,
    deadlock_timeout_ms: int = DEADLOCK_TIMEOUT_MS,
    cwd: Path | None = None,
    redis: RedisPlan | None = None,
    invariant_cmd: str = "",
) -> Order:
    """Run one order: the schedule names the actor of each statement in turn."""
    async with workspace(dsn, setup, invariant, deadlock_timeout_ms, redis, invariant_cmd) as ws:
        return await _one_order(ws, actors, following(schedule), cwd)
