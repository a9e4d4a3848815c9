"""A plan's run: its variants one after another under the same knobs, the next variant's
database made while one runs (and a spare for the plan that follows), each variant's
record given the verdicts of the claims its settings are made for, then written.
One variant's own run is lab/load/variant.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lab.core.claims import judge_all
from lab.core.profiles import claims_for_run
from lab.core.records import Record
from lab.core.results import write_record
from lab.core.scenario import check_params
from lab.load.databases import SPARES, create_database, database_name, drop_made, server_key
from lab.load.plan import RunPlan, pg_connections
from lab.load.variant import run_variant
from lab.servers import Servers

# run_plan makes the next variant's database on a connection of its own while a variant
# runs, when the run leaves this many of the server's connections free besides its own
PREPARE_HEADROOM = 20


async def run_plan(
    plan: RunPlan, servers: Servers, on_record: Callable[[Record], None] | None = None
) -> list[Record]:
    """Run every variant of the plan with the same knobs; judge claims; write records."""
    check_params(plan.scenario, plan.knobs.n, plan.params)
    records: dict[str, Record] = {}
    ahead: dict[str, asyncio.Task[str]] = {}  # the next variant's database, made meanwhile
    spare: asyncio.Task[str] | None = None  # the next plan's, made during the last variant
    try:
        for i, variant in enumerate(plan.variants):
            following = plan.variants[i + 1] if i + 1 < len(plan.variants) else None
            if following is not None and _made_ahead(plan, servers):
                name = database_name(plan.run_id, plan.scenario.id, following)
                ahead[following] = asyncio.create_task(
                    create_database(servers, name, plan.knobs.deadlock_timeout_ms), name=name
                )
            elif following is None and plan.spare_after and _made_ahead(plan, servers):
                name = database_name(plan.run_id, plan.scenario.id, "spare")
                spare = asyncio.create_task(
                    create_database(servers, name, plan.knobs.deadlock_timeout_ms), name=name
                )
            await _plan_variant(
                plan, variant, servers, records, on_record, ahead.pop(variant, None)
            )
        if spare is not None:
            task, spare = spare, None
            try:
                SPARES.setdefault(server_key(servers), []).append(await task)
            except Exception:
                await drop_made(servers, task)
    finally:
        for task in ahead.values():  # made for a variant that did not run: dropped
            await drop_made(servers, task)
        if spare is not None:
            await drop_made(servers, spare)
    if plan.write:  # claims that compare variants are known only now
        for rec in records.values():
            write_record(rec)
    return list(records.values())


def _made_ahead(plan: RunPlan, servers: Servers) -> bool:
    """Whether the next variant's database can be made during this one: PostgreSQL is
    used and the run leaves room for one more connection."""
    if "pg" not in plan.scenario.uses or servers.pg is None:
        return False
    need = pg_connections(plan.scenario, plan.knobs)
    return need + PREPARE_HEADROOM <= servers.pg.max_connections


async def _plan_variant(
    plan: RunPlan,
    variant: str,
    servers: Servers,
    records: dict[str, Record],
    on_record: Callable[[Record], None] | None,
    made: asyncio.Task[str] | None,
) -> None:
    try:
        rec = await run_variant(plan, variant, servers, made)
    except BaseException:
        if made is not None:
            await drop_made(servers, made)
        raise
    records[variant] = rec
    _attach_claims(plan, records)
    if plan.write:
        write_record(rec)
    if on_record is not None:
        on_record(rec)


def _attach_claims(plan: RunPlan, records: dict[str, Record]) -> None:
    """The verdicts of the claims these settings are made for; the others, with why not."""
    claims, not_judged = claims_for_run(plan.scenario, plan.knobs, plan.params, plan.case)
    verdicts = judge_all(tuple(claims), records)
    judged = {(v["id"], v["text"]) for v in verdicts}
    for v in [v for v in verdicts if v.get("not_judged")]:  # the check said why not
        verdicts.remove(v)
        not_judged.append(
            {"id": v["id"], "text": v["text"], "variants": v["variants"], "why": v["measured"]}
        )
    for c in claims:
        if (c.id, c.text) in judged:
            continue
        missing = [v for v in c.variants if v not in records]
        why = (
            f"needs the {', '.join(missing)} variant(s) too"
            if missing
            else "these settings do not exercise it"
        )
        not_judged.append({"id": c.id, "text": c.text, "variants": list(c.variants), "why": why})
    chance = {(c.id, c.text): c for c in claims if c.trials > 1}
    for v in [v for v in verdicts if (v["id"], v["text"]) in chance]:
        # one run here, where verify judges several: NOT JUDGED, never held on one trial
        c = chance[(v["id"], v["text"])]
        verdicts.remove(v)
        this = "held" if v["status"] == "held" else f"was {v['status']}"
        why = (
            f"1 of {c.trials} trials here (verify needs {c.needed(c.trials)} of {c.trials}); "
            f"this one {this}: {v['measured']}"
        )
        not_judged.append({"id": c.id, "text": c.text, "variants": list(c.variants), "why": why})
    for variant, rec in records.items():
        rec["claims"] = [v for v in verdicts if variant in v["variants"]]
        rec["claims_not_judged"] = [n for n in not_judged if variant in n["variants"]]
