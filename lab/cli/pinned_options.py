"""The options of `locklab trace` and `explore` (lab/cli/pinned.py): a scenario or a spec, or
actors and their setup and invariant, and explore's own."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ActorCommands = Annotated[
    list[str] | None,
    typer.Option(
        "--actor",
        help="A command to run as one actor, through the gate (repeat it; no scenario then). "
        "It gets PGHOST/PGPORT/PGUSER/PGDATABASE/PGPASSFILE and DATABASE_URL.",
    ),
]
SetupFile = Annotated[
    Path | None, typer.Option("--setup", help="With --actor: SQL run once, copied per order.")
]
InvariantFile = Annotated[
    Path | None,
    typer.Option("--invariant", help="With --actor: SQL returning one boolean row (true: kept)."),
]
RedisSetupFile = Annotated[
    Path | None,
    typer.Option(
        "--redis-setup",
        help="With --actor: Redis commands, one a line, run on an emptied Redis before "
        "every order (actors get REDIS_URL, REDIS_HOST, REDIS_PORT).",
    ),
]
InvariantCmd = Annotated[
    str | None,
    typer.Option(
        "--invariant-cmd",
        help="With --actor: a command run after every order with the actors' environment "
        "(both stores); exit 0: kept.",
    ),
]
Pauses = Annotated[
    list[int] | None,
    typer.Option(
        "--pause",
        help="With --actor: only this actor (repeat it) may be held until a Redis lease it "
        "set runs out (default: every actor).",
    ),
]
OptionalScenario = Annotated[
    str | None,
    typer.Argument(help="Scenario id (see `locklab list`), a scenario file, or FILE.spec."),
]
ExploreDeadlockTimeout = Annotated[
    int | None,
    typer.Option("--deadlock-timeout", help="PostgreSQL deadlock_timeout in ms (default 100)."),
]
ExploreJson = Annotated[bool, typer.Option("--json", help="Print the explore record only.")]
MaxOrders = Annotated[int | None, typer.Option("--max", help="With --actor: run at most N orders.")]
FirstOnly = Annotated[
    bool, typer.Option("--first", help="With --actor: stop at the first broken order.")
]
Reduce = Annotated[
    bool,
    typer.Option(
        "--reduce",
        help="A scenario: run one interleaving of each set that differ only in steps the "
        "server shows commute; the counts are then of those (docs/gate.md).",
    ),
]
AllOrders = Annotated[
    bool,
    typer.Option(
        "--all-orders",
        help="With --actor: run every order, also those that differ only in statements "
        "the server shows commute (docs/gate.md).",
    ),
]
SpecOut = Annotated[
    Path | None,
    typer.Option(
        "--spec",
        help="With --actor: write the first broken order as a 1-minimal isolation spec "
        "(FILE.spec, and the tester's output in FILE.out).",
    ),
]
Exhaustive = Annotated[
    bool,
    typer.Option(
        "--exhaustive",
        help="With --actor: refuse to sample; fail when a replay diverges (a timer, SKIP "
        "LOCKED) instead of going on with sampled orders.",
    ),
]
SampleSeed = Annotated[
    int | None,
    typer.Option("--seed", help="With --actor: the seed of sampled orders (default 1)."),
]


def store_options(
    redis_setup: Path | None, cmd: str | None, pause: list[int] | None
) -> dict[str, bool]:
    """The actors' options beyond PostgreSQL's, given or not."""
    given = {"--redis-setup": redis_setup, "--invariant-cmd": cmd, "--pause": pause}
    return {name: value is not None for name, value in given.items()}
