"""upsert-idempotency: what the client probes after every run, pinned or load, and what is
judged on it. The invariant: one charge per key, every page view counted, the client's
retry of the finished request replayed, the key reused for another body refused (422). The
gotchas of LC-19, probed on the tables the run left: the id sequence moves on conflicts, DO
NOTHING returns no row for the existing key, one statement may not affect the same row
twice (21000); each gotcha claim reads fixed's record, and as its counterfactual a code mutant
(upsert_idempotency.py's MUTANTS) whose statement does not give that gotcha.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import asyncpg

from lab.core.claims import Claim, Record, on_mutant
from lab.core.scenario import Check, Env
from lab.core.steps import Session
from scenarios.upsert_idempotency import upsert_idempotency as code
from scenarios.upsert_idempotency.upsert_idempotency import KEY, NEEDS_17, PRODUCT

OTHER_BODY = {"cart": "c-2", "amount": 1250}  # the same key for another body: refused (422)
VIEWS_COUNTED = "every page view counted"
REPLAYED = "a retry of the finished request replays its stored response"
REFUSED = "the key reused for another body is refused (422)"
TWICE = (
    "INSERT INTO daily_stats (day, product_id, views) VALUES ($2, $1, 1), ($2, $1, 1)"
    " ON CONFLICT (day, product_id)"
    " DO UPDATE SET views = daily_stats.views + EXCLUDED.views"
)
# the mutant's (GROUPED): the same two views, summed into one row per key before the upsert
TWICE_GROUPED = (
    "INSERT INTO daily_stats (day, product_id, views) SELECT day, product_id, sum(views)"
    " FROM (VALUES ($2::date, $1::int, 1), ($2::date, $1::int, 1)) AS v(day, product_id, views)"
    " GROUP BY day, product_id ON CONFLICT (day, product_id)"
    " DO UPDATE SET views = daily_stats.views + EXCLUDED.views"
)


async def invariant(env: Env) -> list[Check]:
    """One charge per key, every page view counted; then the client's retry is replayed
    and the reused key refused (probed with the variant's own claim)."""
    charges = await env.db.fetchval("SELECT count(*) FROM charges WHERE idem_key = $1", KEY)
    views = await env.db.fetchval(code.SQL["find_views"], PRODUCT, code.DAY) or 0
    sent = env.counters.get("views_sent", 0)
    async with env.db.acquire() as proxy:  # a pooled connection: the probe is not gated
        conn = cast(asyncpg.Connection, proxy)
        probe, claim = Session("client", conn, 0), code.upserts(env.variant)[0]
        if env.variant == "buggy-merge" and conn.get_server_version().major < 17:
            retry = reuse = NEEDS_17
        else:
            retry = await code.checkout(env, probe, claim, code.BODY)
            reuse = await code.checkout(env, probe, claim, OTHER_BODY)
    ev = env.extra_evidence
    same = ev.get("response") is not None and ev.get("replayed") == ev.get("response")
    await _gotchas(env)
    return [
        Check("one charge per idempotency key", charges == 1, f"{charges} charges for {KEY}"),
        Check(VIEWS_COUNTED, views == sent, f"{views} counted of {sent} sent"),
        Check(REPLAYED, retry == "replayed" and same, f"retry: {retry}, same response: {same}"),
        Check(REFUSED, reuse == "key_reused", f"other body: {reuse}"),
    ]


async def _gotchas(env: Env) -> None:
    """LC-19: the id sequence moves on conflicts; one statement may not hit a row twice."""
    new_id = await env.db.fetchval(code.SQL["insert_view"] + " RETURNING id", PRODUCT + 1, code.DAY)
    rows = await env.db.fetchval("SELECT count(*) FROM daily_stats")
    env.add("id_gap", int(new_id) - int(rows))
    try:
        await env.db.execute(TWICE_GROUPED if env.variant == code.GROUPED else TWICE, 303, code.DAY)
        error = "none"
    except asyncpg.PostgresError as exc:
        error = f"{exc.sqlstate}: {str(exc).splitlines()[0]}"
        env.add(f"twice_{exc.sqlstate}")
    env.extra_evidence["gotchas"] = {
        "new_row_id": new_id,
        "rows": rows,
        "same_key_twice_in_one_statement": error,
    }


Gotcha = Callable[[dict[str, Any], dict[str, Any]], tuple[bool, str]]  # counters, evidence


def _gotcha(text: str, published: str, read: Gotcha, mutant: str) -> Claim:
    """A gotcha of LC-19, judged by `read` on fixed's counters and gotcha evidence of a load.
    Every variant's probe shows it alike: its counterfactual is `mutant`'s run, fixed with
    the statement the gotcha comes from changed."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records["fixed"]
        held, seen = read(rec["counters"], rec["evidence"].get("gotchas", {}))
        return held, f"fixed: {seen}"

    return on_mutant(Claim("LC-19", text, ("fixed",), check, published), mutant)


def _no_row(c: dict[str, Any], g: dict[str, Any]) -> tuple[bool, str]:
    n = c.get("claim_no_row", 0)
    return n >= 1, f"DO NOTHING returned no row {n}×"


def _id_gap(c: dict[str, Any], g: dict[str, Any]) -> tuple[bool, str]:
    gap = c.get("id_gap", 0)
    return gap >= 1, f"new row got id {g.get('new_row_id')} with {g.get('rows')} rows (gap {gap})"


def _twice(c: dict[str, Any], g: dict[str, Any]) -> tuple[bool, str]:
    seen = f"same key twice in one statement: {g.get('same_key_twice_in_one_statement')}"
    return c.get("twice_21000", 0) == 1, seen
