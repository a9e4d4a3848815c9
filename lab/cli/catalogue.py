"""Commands about the catalogue and the machine: list, claims, show, doctor, locks, new."""

from __future__ import annotations

import asyncio
import math
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from lab.cli.base import _tables, app, guarded, out
from lab.cli.options import ScenarioId, find_scenario
from lab.core.loader import command_name
from lab.errors import LabError
from lab.servers import state_path


@app.command("list")
def list_cmd() -> None:
    """List the scenarios, their variants and sources."""
    from rich.table import Table

    from scenarios import SCENARIOS

    table = Table(title="scenarios")
    for col in ("id", "variants", "uses", "source", "what"):
        table.add_column(col, overflow="fold")
    for s in SCENARIOS:
        table.add_row(
            s.id, ", ".join(s.variants), ", ".join(sorted(s.uses)), ", ".join(s.sources), s.title
        )
    out().print(table)


@app.command("claims")
def claims_cmd(
    markdown: Annotated[
        bool, typer.Option("--markdown", help="The catalogue as Markdown (docs/claims.md).")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file, not stdout.")
    ] = None,
) -> None:
    """Every document claim id, which scenarios reach it, and each scenario's claims."""

    def body() -> None:
        from rich.table import Table

        from lab.core.catalogue import CLAIM_IDS, DOCUMENTS, document_ids, reached, render_markdown
        from scenarios import SCENARIOS

        if markdown or output is not None:
            text = render_markdown(SCENARIOS)
            if output is None:
                sys.stdout.write(text)
            else:
                output.write_text(text, encoding="utf-8")
                out().print(f"wrote {output}", markup=False)
            return
        by_id = reached(SCENARIOS)
        table = Table(title="document claims")
        for col in ("id", "claim", "scenarios"):
            table.add_column(col, overflow="fold")
        for doc in DOCUMENTS:
            for i in document_ids(doc):
                table.add_row(i, CLAIM_IDS[i], ", ".join(by_id.get(i, [])) or "not reached")
        console = out()
        console.print(table)
        for doc in DOCUMENTS:
            ids = document_ids(doc)
            hit = sum(1 for i in ids if i in by_id)
            console.print(f"{doc}: {hit} of {len(ids)} ids carried by a claim", markup=False)

    guarded(body)


@app.command()
def show(scenario: ScenarioId) -> None:
    """Print a scenario's spec: docstring, variants, knobs and claims."""

    def body() -> None:
        sc = find_scenario(scenario)
        console = out()
        # the docstring is laid out already: wrapping it at 80 columns scrambles it
        console.print(sc.doc.strip(), markup=False, soft_wrap=True)
        console.print(f"\nvariants: {', '.join(sc.variants)}")
        d = sc.defaults
        console.print(
            f"defaults: -n {d.n} --arrival {d.arrival} --connect {d.connect} "
            f"--deadlock-timeout {d.deadlock_timeout_ms}"
        )
        for k, v in sc.params.items():
            spec = sc.param_specs.get(k)
            takes = f" ({spec.bounds()})" if spec is not None and spec.bounds() else ""
            console.print(f"  -p {k}={v}  {sc.param_help.get(k, '')}{takes}", markup=False)
        for name, overrides in sc.cases.items():
            settings = " ".join(f"{k}={v}" for k, v in overrides.items())
            console.print(
                f"case {name}: {settings}  (locklab run {command_name(sc)} --case {name})",
                markup=False,
            )
        for v, named in (sc.pinned.schedules if sc.pinned else {}).items():
            for name, steps in named.items():
                console.print(f"schedule {v} {name}: {', '.join(steps)}", markup=False)
        for c in sc.claims:
            console.print(f"claim {c.id} [{', '.join(c.variants)}] {c.text}", markup=False)

    guarded(body)


@app.command()
def doctor() -> None:
    """Which servers and binaries would be used, their versions, and whether Docker answers."""

    def body() -> None:
        from lab.servers import docker
        from lab.servers.embedded import find_redis_server, pg_bindir_candidates, usable_bindir

        console = out()
        console.print(f"python {sys.version.split()[0]}, euid {os.geteuid()}")
        for env in ("LOCKLAB_PG_DSN", "LOCKLAB_REDIS_URL", "LOCKLAB_SERVERS", "LOCKLAB_PG_BINDIR"):
            if os.environ.get(env):
                console.print(f"{env} is set", markup=False)
        reason = docker.docker_unavailable()
        console.print(f"docker: {'engine answers' if reason is None else reason}")
        for bindir, source in pg_bindir_candidates():
            version = usable_bindir(bindir)
            state = f"PostgreSQL {version}" if version else "not usable"
            console.print(f"postgresql candidate: {bindir} ({source}): {state}", markup=False)
        try:
            binary, source = find_redis_server()
            console.print(f"redis-server: {binary} ({source})", markup=False)
        except LabError as exc:
            console.print(f"redis-server: {exc}", markup=False)
        console.print(
            f"kept servers state: {state_path()} ({'present' if state_path().exists() else 'none'})",
            markup=False,
        )
        from lab.servers.versions import pg_available, redis_available

        for kind, found in (
            ("--pg-version", pg_available()),
            ("--redis-version", redis_available()),
        ):
            listed = ", ".join(f"{a.label} ({a.source})" for a in found) or "none"
            console.print(f"{kind}: {listed}", markup=False)

    guarded(body)


@app.command()
def locks(
    pg_dsn: Annotated[
        str | None,
        typer.Option(
            "--pg-dsn",
            help="Server to look at (env LOCKLAB_PG_DSN; default: the kept servers). "
            "Any role works; pg_monitor shows other users' queries.",
        ),
    ] = None,
    database: Annotated[
        str | None, typer.Option("--database", "-d", help="Only this database's sessions.")
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", help="Redraw live until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between redraws in --watch.")] = 1.0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Who blocks whom: the pg_blocking_pids() tree, each waiter's lock, wait and holder (read-only)."""

    def body() -> None:
        from lab.load import locks as lk
        from lab.output import locks as drawn
        from lab.servers import kept_servers
        from lab.servers.base import check_url

        dsn = pg_dsn or os.environ.get("LOCKLAB_PG_DSN")
        if not dsn:
            kept = kept_servers()
            if kept is None or kept.pg is None:
                raise LabError(
                    "locks: give --pg-dsn (or LOCKLAB_PG_DSN), or start `locklab servers up`"
                )
            dsn = kept.pg.dsn
        check_url(dsn, ("postgresql", "postgres"), "PostgreSQL DSN")
        if not 0.1 <= interval < math.inf:
            raise LabError(f"--interval {interval}: at least 0.1 s")
        if watch:
            if as_json:
                raise LabError("--watch draws in the terminal; --json prints once")
            drawn.watch(out(), dsn, database, interval)
            return
        sessions = asyncio.run(lk.snapshot(dsn, database))
        if as_json:
            sys.stdout.write(lk.to_json(sessions) + "\n")
        else:
            console = _tables()
            console.print(drawn.render(sessions))
            if any(s.query == "<insufficient privilege>" for s in sessions):
                console.print(f"[dim]{lk.ROLE_NOTE}[/dim]")

    guarded(body)  # Ctrl-C is how --watch ends: lab/output/locks.py watch() returns quietly


@app.command("new")
def new_cmd(
    name: Annotated[str, typer.Argument(help="The scenario's name, e.g. my-checkout.")],
    folder: Annotated[
        str, typer.Option("--dir", help="Folder to write NAME.py into (default: here).")
    ] = ".",
) -> None:
    """Write a scenario skeleton (buggy/fixed pair, a schedule, a claim) to ./NAME.py."""

    def body() -> None:
        from pathlib import Path

        from lab.core.new import write_skeleton

        path = write_skeleton(name, Path(folder))
        shown = f"./{path.name}" if folder == "." else str(path)
        out().print(f"wrote {shown}; next: locklab trace {shown}", markup=False)

    guarded(body)
