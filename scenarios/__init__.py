"""The scenario catalogue, listed explicitly: no import side effects, no discovery."""

from __future__ import annotations

from lab.scenario import Scenario
from scenarios import checkout_deadlock, money_transfer

SCENARIOS: tuple[Scenario, ...] = (checkout_deadlock.SCENARIO, money_transfer.SCENARIO)


def by_id() -> dict[str, Scenario]:
    return {s.id: s for s in SCENARIOS}
