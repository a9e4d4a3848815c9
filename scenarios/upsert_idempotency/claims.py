"""upsert-idempotency: what the documents claim, how each claim is judged, and the assembly.

The race needs an order (both requests look before either inserts), so the buggy answers
and the fix's are judged on the pinned schedule double-submit (`locklab trace
upsert-idempotency`), where the server reports the second request blocked on the first
one's uncommitted key, and on every interleaving of the same steps (`locklab explore
upsert-idempotency`). Under a load (`locklab run`) nothing forces the order, so only what
holds in any order is judged there: the fix charges once, counts every view, and its
gotchas (LC-19). After every run, pinned or load, the client retries the request with the
same body, then reuses the key for another body; the invariants check the answers.

buggy-merge's MERGE ... RETURNING needs PostgreSQL 17 (the document: "thêm RETURNING ở
PG 17"): on an older server the variant runs nothing and answers needs_pg17, and every
claim it feeds is "not judged: needs PostgreSQL 17", neither held nor failed by a syntax
error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, cast

import asyncpg

from lab.core.claims import Claim, NotJudged, Record, invariants_hold, mutation, repeated
from lab.core.scenario import Check, Defaults, Env, Scenario
from lab.core.steps import Session
from lab.errors import LabError
from lab.pinned import RC, broke_in_some, kept_in_all, on_canonical
from scenarios.upsert_idempotency import upsert_idempotency as code

KEY, PRODUCT, NEEDS_17 = code.KEY, code.PRODUCT, code.NEEDS_17
OTHER_BODY = {"cart": "c-2", "amount": 1250}  # the same key for another body: refused (422)
CANON = "double-submit"
VIEWS_COUNTED = "every page view counted"
REPLAYED = "a retry of the finished request replays its stored response"
REFUSED = "the key reused for another body is refused (422)"
TWICE = (
    "INSERT INTO daily_stats (day, product_id, views) VALUES ($2, $1, 1), ($2, $1, 1)"
    " ON CONFLICT (day, product_id)"
    " DO UPDATE SET views = daily_stats.views + EXCLUDED.views"
)


def validate(n: int, p: Mapping[str, Any]) -> None:
    if n < 2:
        raise LabError(f"-n {n}: the race needs at least 2 concurrent requests")


async def invariant(env: Env) -> list[Check]:
    """One charge per key, every page view counted; then the client's retry is replayed
    and the reused key refused (probed with the variant's own claim)."""
    charges = await env.db.fetchval("SELECT count(*) FROM charges WHERE idem_key = $1", KEY)
    views = await env.db.fetchval(code.SQL["find_views"], PRODUCT, code.DAY) or 0
    sent = env.counters.get("views_sent", 0)
    async with env.db.acquire() as proxy:  # a pooled connection: the probe is not gated
        conn = cast(asyncpg.Connection, proxy)
        probe, claim = Session("client", conn, 0), code.UPSERTS[env.variant][0]
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
        await env.db.execute(TWICE, 303, code.DAY)
        error = "none"
    except asyncpg.PostgresError as exc:
        error = f"{exc.sqlstate}: {str(exc).splitlines()[0]}"
        env.add(f"twice_{exc.sqlstate}")
    env.extra_evidence["gotchas"] = {
        "new_row_id": new_id,
        "rows": rows,
        "same_key_twice_in_one_statement": error,
    }


# --- claims on the pinned double submit ---------------------------------------------------


def _lines(run: Mapping[str, Any], step: str) -> list[str]:
    """The transcript lines of `step` ("s2 insert"), its <... completed> line included."""
    return [x for x in str(run["transcript"]).splitlines() if x.startswith(f"{step} ")]


def _said(run: Mapping[str, Any], step: str, text: str) -> bool:
    return any(text in x for x in _lines(run, step))


def _double_submit(
    cid: str,
    variant: str,
    text: str,
    outcomes: Mapping[str, str],
    waited: tuple[str, ...],
    shows: tuple[tuple[str, str], ...],
    broken: tuple[str, ...],
    published: str = "",
) -> Claim:
    """The canonical double submit of `variant`: each session's answer, the steps the
    server showed blocked, what some steps printed (step, text) and which invariants broke."""

    def check(run: dict[str, Any]) -> tuple[bool, str]:
        got = " ".join(f"{s}={o}" for s, o in run["outcomes"].items())
        bad = [i["name"] for i in run["invariants"] if not i["held"]]
        seen = [f"{step}: {'yes' if _said(run, step, t) else 'NO'} {t!r}" for step, t in shows]
        held = (
            run["outcomes"] == dict(outcomes)
            and all(w in run["waited"] for w in waited)
            and all(_said(run, step, t) for step, t in shows)
            and sorted(bad) == sorted(broken)
        )
        return held, (
            f"{CANON}: {got}; waited: {', '.join(run['waited']) or 'none'}; "
            f"{'; '.join(seen)}; broken: {', '.join(bad) or 'none'}"
        )

    return on_canonical(cid, variant, CANON, text, check, published=published)


def _step_error(cid: str, text: str, published: str) -> Claim:
    """Some interleaving of buggy-merge has a step fail with 23505; none of fixed does."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        m, f = (records[v]["by_isolation"].get(RC) for v in ("buggy-merge", "fixed"))
        if m is None or f is None:
            return None
        km, kf = (c["step_sqlstates"].get("23505", 0) for c in (m, f))
        return m["ran"] > 0 and f["ran"] > 0 and km > 0 and kf == 0, (
            f"a step failed with 23505 in {km}/{m['ran']} interleavings of MERGE, "
            f"{kf}/{f['ran']} of ON CONFLICT"
        )

    return Claim(cid, text, ("buggy-merge", "fixed"), check, published, explore=True, levels=(RC,))


def needs_17(claim: Claim) -> Claim:
    """`claim`, not judged when buggy-merge ran on a server older than PostgreSQL 17."""
    inner: Callable[[Mapping[str, Record]], tuple[bool, str] | None] = claim.check

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        if NEEDS_17 in json.dumps(records.get("buggy-merge", {}), default=str):
            raise NotJudged("needs PostgreSQL 17 (MERGE ... RETURNING); buggy-merge did not run")
        return inner(records)

    return replace(claim, check=check)


# --- claims on load records (what holds in any order) ----------------------------------


LOAD_TRIALS = 3  # whether buggy's racing requests collide is chance (20 of 20 runs did)


def _fixed_under_load(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    n, got = rec["knobs"]["n"], dict(rec["outcomes"])
    errors = {k: v for k, v in got.items() if k[:1].isdigit()}
    top = rec["samples"].get("views_returned", {}).get("max")
    owners = got.get("ok", 0)
    return not errors and owners == 1 and top == n and not rec["counters"].get("views_23505"), (
        f"fixed: {got}; counter upsert returned up to {top} of {n}"
    )


Gotcha = Callable[[dict[str, Any], dict[str, Any]], tuple[bool, str]]  # counters, evidence


def _gotcha(text: str, published: str, read: Gotcha, change: Callable[[Record], None]) -> Claim:
    """A gotcha of LC-19, judged by `read` on fixed's counters and gotcha evidence of a load.
    Every variant runs the same probes, so its counterfactual is a mutation: `change`."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records["fixed"]
        held, seen = read(rec["counters"], rec["evidence"].get("gotchas", {}))
        return held, f"fixed: {seen}"

    return Claim(
        "LC-19", text, ("fixed",), check, published, counterfactual=mutation("fixed", change)
    )


def _no_row(c: dict[str, Any], g: dict[str, Any]) -> tuple[bool, str]:
    n = c.get("claim_no_row", 0)
    return n >= 1, f"DO NOTHING returned no row {n}×"


def _row_back(rec: Record) -> None:
    """As DO UPDATE ... RETURNING would count: every claim gets the key's row back."""
    rec["counters"]["claim_no_row"] = 0


def _id_gap(c: dict[str, Any], g: dict[str, Any]) -> tuple[bool, str]:
    gap = c.get("id_gap", 0)
    return gap >= 1, f"new row got id {g.get('new_row_id')} with {g.get('rows')} rows (gap {gap})"


def _no_gap(rec: Record) -> None:
    """As an id drawn only for a row inserted would read: the new row's id is the count."""
    rec["counters"]["id_gap"] = 0
    gotchas = rec["evidence"]["gotchas"]
    gotchas["new_row_id"] = gotchas["rows"]


def _twice(c: dict[str, Any], g: dict[str, Any]) -> tuple[bool, str]:
    seen = f"same key twice in one statement: {g.get('same_key_twice_in_one_statement')}"
    return c.get("twice_21000", 0) == 1, seen


def _twice_allowed(rec: Record) -> None:
    """As a statement allowed to update the same row twice would report: no 21000."""
    rec["counters"].pop("twice_21000", None)
    rec["evidence"]["gotchas"]["same_key_twice_in_one_statement"] = "none"


PUBLISHED = {
    "fixed": "Lần gọi đầu: key = chk_7f3a (1 row: ta sở hữu request này); Client retry: (0 rows)"
    " -- DO NOTHING không trả row cũ!; counter upsert RETURNING views: 42",
    "buggy": 'hai request cùng thấy "chưa có" và cùng insert, một bên dính duplicate key',
    "buggy-merge": "MERGE với insert đồng thời vẫn có thể lỗi unique violation",
}
LC21 = (
    "nếu done thì trả lại đúng response cũ, nếu in_progress thì trả 409 ..., nếu "
    "request_hash khác thì trả 422"
)
ERR = "ERROR 23505 duplicate key"
CLAIMS = (
    _double_submit(
        "LC-18",
        "buggy",
        "SELECT then INSERT: neither request sees the other's uncommitted key, the second "
        "insert waits on the first one's and fails with 23505",
        {"s1": "ok", "s2": "23505"},
        ("s2 claim",),
        (("s1 claim", "(no row); INSERT 0 1"), ("s2 claim", ERR)),
        (VIEWS_COUNTED,),
        PUBLISHED["buggy"],
    ),
    _double_submit(
        "LC-18",
        "buggy",
        "buggy: a page view fails with 23505 (the second counter insert waits, then fails)",
        {"s1": "ok", "s2": "23505"},
        ("s2 view",),
        (("s1 view", "views=1"), ("s2 view", ERR)),
        (VIEWS_COUNTED,),
    ),
    _double_submit(
        "LC-18",
        "fixed",
        "INSERT ... ON CONFLICT under the same race: no 23505; the waiter gets no row, and the "
        "counter's waiter updates the new row and gets 2",
        {"s1": "ok", "s2": "in_progress"},
        ("s2 claim", "s2 view"),
        (("s1 claim", f"key={KEY}"), ("s2 claim", "(no row)"), ("s2 view", "views=2")),
        (),
        PUBLISHED["fixed"],
    ),
    needs_17(
        _double_submit(
            "LC-20",
            "buggy-merge",
            "MERGE under a concurrent insert waits, then fails with 23505, for the key and for "
            "the counter",
            {"s1": "ok", "s2": "23505"},
            ("s2 claim", "s2 view"),
            (("s1 claim", f"key={KEY}"), ("s2 claim", ERR), ("s2 view", ERR)),
            (VIEWS_COUNTED,),
            PUBLISHED["buggy-merge"],
        )
    ),
    _double_submit(
        "LC-21",
        "fixed",
        "Idempotency key: in_progress → 409, done → the stored response replayed, other hash → 422",
        {"s1": "ok", "s2": "in_progress"},
        ("s2 claim",),
        (("s2 answer", "status=in_progress"),),
        (),
        LC21,
    ),
    needs_17(
        _step_error(
            "LC-20",
            "MERGE under a concurrent insert fails with a unique violation in some "
            "interleavings; ON CONFLICT in none",
            PUBLISHED["buggy-merge"],
        )
    ),
    kept_in_all(
        "LC-18",
        "fixed",
        "fixed keeps every invariant (one charge, every view counted, the retry replayed, the "
        "reused key refused) in every interleaving",
    ),
    broke_in_some("LC-18", "buggy", "buggy loses a page view in some interleavings"),
    needs_17(
        broke_in_some("LC-20", "buggy-merge", "buggy-merge loses a page view in some interleavings")
    ),
    # whether buggy's racing requests collide is chance: over LOAD_TRIALS runs, so its
    # counterfactual (buggy's runs) holds only if none of them collided
    repeated(
        Claim(
            "LC-18",
            "fixed under a load: no 23505, one request charges, the last counter upsert returns n",
            ("fixed",),
            _fixed_under_load,
            PUBLISHED["fixed"],
        ),
        LOAD_TRIALS,
    ),
    invariants_hold("LC-18", "fixed", "fixed: one charge, every view counted (a load)"),
    # each gotcha is PostgreSQL's, whatever the variant: its counterfactual is the record
    # changed where the gotcha shows (one claim each, so that each can be seen to fail)
    _gotcha(
        "DO NOTHING returns no row for the existing key",
        "RETURNING không trả row có sẵn khi DO NOTHING",
        _no_row,
        _row_back,  # counterfactual: DO UPDATE ... RETURNING hands the existing row back
    ),
    _gotcha(
        "conflicts consume the sequence: the next new row's id leaves a gap",
        "sequence ... vẫn bị tiêu hao khi conflict",
        _id_gap,
        _no_gap,  # counterfactual: an id drawn only when a row is inserted, no gap
    ),
    _gotcha(
        "one statement may not affect the same row twice (21000)",
        "ON CONFLICT DO UPDATE command cannot affect row a second time",
        _twice,
        _twice_allowed,  # counterfactual: a statement that updated the row twice, no error
    ),
)

SCENARIO = Scenario(
    id="upsert-idempotency",
    validate=validate,
    doc=code.__doc__ or "",
    kind="actors",
    variants=code.PINNED.actors(),
    pinned=code.PINNED,
    outcomes=("ok", "in_progress", "replayed", "key_reused", "23505", NEEDS_17),
    claims=CLAIMS,
    published=PUBLISHED,
    schema=code.schema,  # no rows: every run starts from empty tables
    invariant=invariant,
    # 20 submits of one key at once: buggy gave 19 of 20 23505 in each of 6 runs here, 3 of
    # them beside a busy core; a pair did not collide at all in one quick verify in 15
    defaults=Defaults(n=20, arrival="burst", actor_timeout_s=30, run_timeout_s=60),
    sources=("LC",),
)
