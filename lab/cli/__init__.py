"""The `locklab` command: plain sync Typer commands that call asyncio.run(). One module per
command group; each command parses what was typed, calls the lab, prints the result."""

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
