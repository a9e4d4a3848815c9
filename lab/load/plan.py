"""What a run asks for (RunPlan: a scenario's variants under one set of knobs) and the
connections one of its variants takes: the PostgreSQL server's, the lab process's own,
and the check that the server has room for them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.core.knobs import Knobs, connections_needed, server_connections_needed
from lab.core.scenario import Scenario
from lab.errors import LabError
from lab.servers import Servers

ADMIN_CONNECTIONS = 4  # the run database's own small pool, plus the admin connection


@dataclass
class RunPlan:
    scenario: Scenario
    variants: Sequence[str]
    knobs: Knobs
    params: Mapping[str, Any]
    run_id: str
    write: bool = True
    case: str = ""  # one of the scenario's cases the knobs and params start from
    spare_after: bool = False  # make an empty database for the plan that follows (verify)


def pg_connections(sc: Scenario, knobs: Knobs) -> int:
    """PostgreSQL server connections one variant of `sc` takes under `knobs` (0: no PG)."""
    if "pg" not in sc.uses:
        return 0
    if sc.kind == "actors":
        need = server_connections_needed(knobs.connect, knobs.n)
    else:
        need = sc.script_connections(knobs.n) if sc.script_connections is not None else 0
    return need + ADMIN_CONNECTIONS


def sockets_needed(plan: RunPlan) -> int:
    """Connections the lab process itself opens for one variant (one file each)."""
    scenario, knobs = plan.scenario, plan.knobs
    need = 0
    if "pg" in scenario.uses:
        opens = scenario.script_connections
        need += ADMIN_CONNECTIONS + (
            connections_needed(knobs.connect, knobs.n)
            if scenario.kind == "actors"
            else (opens(knobs.n) if opens is not None else 0)
        )
    if "redis" in scenario.uses:
        need += connections_needed(knobs.connect, knobs.n) + 16
    return need


def check_room(plan: RunPlan, servers: Servers, free: int) -> None:
    """Raise LabError when the variant needs more PostgreSQL connections than are `free`."""
    knobs = plan.knobs
    need = pg_connections(plan.scenario, knobs)
    if need <= free:
        return
    if plan.scenario.kind == "actors":
        how, fix = f" with --connect {knobs.connect}", "--connect pool:<size> or "
    else:  # a script opens its own sessions; --connect does not apply
        how, fix = "", ""
    raise LabError(
        f"-n {knobs.n}{how} needs {need} PostgreSQL connections; the server "
        f"accepts {free} more "
        f"(max_connections={servers.pg.max_connections if servers.pg else '?'}); "
        f"use {fix}a smaller -n"
    )
