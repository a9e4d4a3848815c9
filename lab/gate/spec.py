"""A broken order as a PostgreSQL isolation spec, shrunk until every step matters.

The spec has the explore's setup, one session per actor connection with each statement
it sent as a step (parameters inlined as literals), and one permutation: the order. A
broken invariant becomes a last step of a session of its own (``check``), so the tester's
output shows it; an error the order ended in shows as the tester prints it. As in
PostgreSQL's own deadlock specs, the session that received a deadlock error gets the
explore's short ``deadlock_timeout`` and the others a long one, so that the server picks
the same victim on every run of the spec.

Then a failure by error (a deadlock, a serialization failure) is shrunk on the real
server (delta debugging over the permutation's steps): a step is dropped when the spec
without it still prints the same errors, until no single step can be dropped
(1-minimal). A broken invariant is not shrunk: it speaks of what every statement did (two
deposits must both be there), and the statements carry values the programs computed from
what they read, so without a step the invariant would fail for another reason (one
deposit alone is not two). Its spec is the whole order. `FILE.out` beside the spec is the tester's output of
the result, so the pair can go into a test suite the way PostgreSQL's own specs do.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from lab.errors import LabError
from lab.gate.explore import Order
from lab.spec.parse import parse_spec
from lab.spec.run import run_spec

LONG_DEADLOCK_TIMEOUT = "10s"  # the sessions that must not be the deadlock's victim
# While shrinking, a step still blocked after this long is cancelled (the tester's own
# rule, with a shorter limit): a candidate that leaves a lock held forever costs seconds,
# not the tester's 300. Its output then lacks the failure, so the step is kept.
SHRINK_WAIT_S = 1.0
CHECK = "check"


@dataclass(frozen=True)
class SpecStep:
    """One statement of the order: its session and its SQL with the values inlined."""

    name: str
    session: str
    sql: str


def steps_of(order: Order) -> list[SpecStep]:
    """The order's granted statements, in order, each a step named after its session."""
    steps = []
    counts: dict[str, int] = {}
    for session, text in order.run.statements:
        counts[session] = counts.get(session, 0) + 1
        name = f"{session.replace('.', '_')}_{counts[session]}"
        if "}" in text:
            raise LabError(f"{name}: a statement with '}}' cannot be an isolation spec's step")
        steps.append(SpecStep(name, session.replace(".", "_"), text.strip().rstrip(";")))
    return steps


def check_sql(invariant: str) -> str:
    """The invariant as one column named `kept`."""
    query = invariant.strip().rstrip(";").strip()
    return f"SELECT kept FROM ({query}) AS invariant(kept)"


def spec_text(
    setup: str,
    steps: list[SpecStep],
    invariant: str | None,
    victims: set[str],
    deadlock_timeout_ms: int,
) -> str:
    """The spec: setup, the sessions with the steps they run, one permutation."""
    if "}" in setup:
        raise LabError("the setup has a '}': it cannot be an isolation spec's setup block")
    lines = [f"setup\n{{\n{setup.strip()}\n}}\n"]
    sessions: dict[str, list[SpecStep]] = {}
    for step in steps:
        sessions.setdefault(step.session, []).append(step)
    for session, own in sessions.items():
        timeout = f"{deadlock_timeout_ms}ms" if session in victims else LONG_DEADLOCK_TIMEOUT
        lines.append(f"session {session}")
        lines.append(f"setup {{ SET deadlock_timeout = '{timeout}'; }}")
        lines.extend(f"step {s.name} {{ {s.sql}; }}" for s in own)
        lines.append("")
    permutation = [s.name for s in steps]
    if invariant is not None:
        lines.append(f"session {CHECK}")
        lines.append(f"step {CHECK} {{ {check_sql(invariant)}; }}")
        lines.append("")
        permutation.append(CHECK)
    lines.append("permutation " + " ".join(permutation))
    return "\n".join(lines) + "\n"


def broken_invariant(output: str) -> bool:
    """The tester's output shows the check step reading false (or NULL)."""
    after = output.split(f"step {CHECK}:", 1)
    if len(after) < 2:
        return False
    row = re.search(r"^kept\n-+\n(.*)$", after[1], re.MULTILINE)
    return row is not None and row[1].strip() in ("f", "")


@dataclass
class Exported:
    text: str  # the spec
    output: str  # what the tester prints for it
    steps: int
    dropped: int
    shrunk: bool  # False: a broken invariant, whose spec is the whole order


async def export(
    order: Order,
    setup: str,
    invariant: str,
    dsn: str,
    deadlock_timeout_ms: int,
) -> Exported:
    """The broken `order` as a 1-minimal spec, judged by running it on the server."""
    steps = steps_of(order)
    errors = {m for m in order.run.error_messages if m}
    victims = {s.replace(".", "_") for s in order.run.deadlocked}
    check = invariant if order.invariant != "True" else None

    async def run(candidate: list[SpecStep], wait_s: float | None = SHRINK_WAIT_S) -> str:
        text = spec_text(setup, candidate, check, victims, deadlock_timeout_ms)
        output, _ = await asyncio.to_thread(run_spec, parse_spec(text, "<export>"), dsn, wait_s)
        return output

    def fails(output: str) -> bool:
        if check is not None and not broken_invariant(output):
            return False
        return all(f"ERROR:  {m}" in output for m in errors)

    output = await run(steps)
    if not fails(output):
        raise LabError(
            "the order does not fail as a spec (the programs did more than their statements "
            "show: a timer, a value they computed); no spec written"
        )
    kept = steps
    if check is None:  # a broken invariant is not shrunk: see the module doc
        kept, _ = await shrink(steps, run, fails, output)
    text = spec_text(setup, kept, check, victims, deadlock_timeout_ms)
    output = await run(kept, None)  # FILE.out: as the tester prints it, at its own limit
    if not fails(output):
        raise LabError("the shrunk spec does not fail on a second run: no spec written")
    return Exported(text, output, len(kept), len(steps) - len(kept), check is None)


async def shrink(
    steps: list[SpecStep],
    run: Callable[[list[SpecStep]], Awaitable[str]],
    fails: Callable[[str], bool],
    output: str,
) -> tuple[list[SpecStep], str]:
    """Drop steps one at a time while the spec still fails, until a whole pass drops none."""
    changed = True
    while changed:
        changed = False
        i = 0
        while i < len(steps):
            candidate = steps[:i] + steps[i + 1 :]
            result = await run(candidate)
            if candidate and fails(result):
                steps, output, changed = candidate, result, True
            else:
                i += 1
    return steps, output
