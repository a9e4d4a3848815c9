"""The `locklab` command: plain sync Typer commands that call asyncio.run(). One module per
command group; each command parses what was typed, calls the lab, prints the result.

The package: ``base`` (the Typer app, its console and the one guard every command runs in:
a failure ends as one line and a non-zero exit, never a traceback), ``options`` (the
options commands share, turned into the lab's objects: scenarios, variants, knobs, a run
plan, servers), then the groups in the order `locklab --help` lists them: ``catalogue``
(list, claims, show, doctor, locks, new), ``runs`` (run, compare), ``verify`` (verify,
results, diff, report), ``pinned`` (trace, explore, spec-suite; their options in
``pinned_options``), ``gate`` (`locklab gate`),
``bench`` (the lab against reference tools on the same server), ``servers`` (servers up,
down, status); ``actors`` is what trace and explore do with --actor (unchanged programs
through the gate).
"""

from __future__ import annotations

import importlib

from lab.cli.base import app
from lab.cli.options import parse_procs

# The command groups, imported in the order `locklab --help` lists their commands.
for _group in ("catalogue", "runs", "verify", "pinned", "gate", "bench", "servers"):
    importlib.import_module(f"lab.cli.{_group}")

__all__ = ["app", "main", "parse_procs"]


def main() -> None:
    app()
