"""Advisory lock keys: two unrelated jobs whose names share a hashtext() block each other.

Symptom:    the nightly report of one job never runs while an unrelated job runs: its
            try-lock returns false, or its lock call hangs, with no job of its own running.
Root cause: the key is `hashtext(name)`, a 32-bit hash; with many job names two collide
            (the birthday bound: ~50% at ~77,000 names), and a one-key advisory lock cannot
            tell them apart.
Fix:        the two-key form `pg_advisory_xact_lock(namespace, id)`: a namespace per kind of
            thing and an exact id (here the job's id in a table of job names), not a hash.
            The two-key space (pg_locks objsubid 2) is also apart from every one-key lock.
Published:  "Key thường được sinh bằng hashtext('job:daily-invoice'), trả về int4, nên có khả
            năng va chạm. Tốt hơn là dùng dạng hai tham số (namespace int4, id int4), ví dụ
            pg_advisory_xact_lock(1, tenant_id)". No numbers (PostgreSQL 17.11)
            — locking-concurrency-control.vi.txt, "Advisory lock"
See:        claim LC-33. The colliding pair was found on this lab's PostgreSQL 17.10 by a
            birthday search (see COLLIDING). Steps, the same in both variants: a holder
            locks job A's key and stays open; job B try-locks its own key, then asks for it
            waiting (finished, or shown blocked by the server); the holder commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from lab.claims import Claim, Record
from lab.interleave import task_or_blocked
from lab.scenario import Defaults, Env, Scenario

# Two job names with the same hashtext(), found by a birthday search on the server:
#   SELECT h, array_agg(name) FROM (SELECT 'job:report-' || i AS name,
#     hashtext('job:report-' || i) AS h FROM generate_series(1, 300000) i) s
#   GROUP BY h HAVING count(*) > 1
# 300,000 names gave 8 pairs (0.56 s); this one has both names below 110,000.
COLLIDING = ("job:report-63270", "job:report-105574")
COLLIDING_HASH = 527789554
NAMESPACE_JOBS = 1  # the two-key form's first key: "jobs" (the document's 1 = balances)
KEYS = {  # variant -> the key arguments of a job, by name ($1)
    "buggy": "hashtext($1)",
    "fixed": f"{NAMESPACE_JOBS}, (SELECT id FROM job_names WHERE name = $1)",
}
ADVISORY = (
    "SELECT classid::int, objid::int, objsubid::int FROM pg_locks"
    " WHERE locktype = 'advisory' AND pid = $1"
)


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE job_names (id int PRIMARY KEY, name text UNIQUE NOT NULL)")
    await env.db.executemany("INSERT INTO job_names VALUES ($1, $2)", list(enumerate(COLLIDING, 1)))


async def buggy(env: Env) -> None:
    await run(env, KEYS["buggy"])


async def fixed(env: Env) -> None:
    await run(env, KEYS["fixed"])  # the whole fix: the key


async def run(env: Env, key: str) -> None:
    a, b = COLLIDING
    holder, other = await env.connect(), await env.connect()
    pid = holder.get_server_pid()
    try:
        await holder.execute("BEGIN")
        await holder.execute(f"SELECT pg_advisory_xact_lock({key})", a)  # step hold: job A
        env.trace("job A", "holds its lock", name=a)
        await other.execute("BEGIN")  # step try: job B's try-lock
        got = await other.fetchval(f"SELECT pg_try_advisory_xact_lock({key})", b)
        await other.execute("ROLLBACK")
        env.trace("job B", "try-lock", name=b, got=got)
        await other.execute("BEGIN")  # step wait: job B asks, waiting
        task = asyncio.create_task(other.execute(f"SELECT pg_advisory_xact_lock({key})", b))
        blocked = await task_or_blocked(env.db, other.get_server_pid(), task, what="job B")
        env.trace("job B", "blocked" if blocked else "locked", blocked_by=blocked)
        locks = [dict(r) for r in await env.db.fetch(ADVISORY, pid)]
        await holder.execute("COMMIT")  # step end
        await task
        await other.execute("COMMIT")
    finally:
        holder.terminate()
        other.terminate()
    hashes = await env.db.fetchrow("SELECT hashtext($1) AS a, hashtext($2) AS b", a, b)
    assert hashes is not None
    env.outcome("ok")
    env.outcome("ok" if got else "lock_busy")
    env.extra_evidence.update(
        names=[a, b],
        hashtext=[hashes["a"], hashes["b"]],
        try_lock=got,
        blocked_by=blocked,
        holder=pid,
        holder_advisory=locks,
    )


# --- claims -------------------------------------------------------------------------------


def _seen(ev: Mapping[str, Any]) -> str:
    (a, b), (ha, hb) = ev["names"], ev["hashtext"]
    wait = (
        f"blocked by {ev['blocked_by']} (holder {ev['holder']})" if ev["blocked_by"] else "granted"
    )
    return (
        f"hashtext({a!r}) = {ha}, hashtext({b!r}) = {hb}; holder's pg_locks "
        f"{ev['holder_advisory']}; B's try-lock {ev['try_lock']}, B's lock {wait}"
    )


def _collide(records: Mapping[str, Record]) -> tuple[bool, str]:
    ev = records["buggy"]["evidence"]
    ha, hb = ev["hashtext"]
    held = (
        ha == hb == COLLIDING_HASH
        and ev["try_lock"] is False
        and ev["holder"] in (ev["blocked_by"] or [])
    )
    return held, f"buggy: {_seen(ev)}"


def _apart(records: Mapping[str, Record]) -> tuple[bool, str]:
    ev = records["fixed"]["evidence"]
    subs = {lk["objsubid"] for lk in ev["holder_advisory"]}
    classes = {lk["classid"] for lk in ev["holder_advisory"]}
    held = ev["try_lock"] is True and ev["blocked_by"] is None
    return held and subs == {2} and classes == {NAMESPACE_JOBS}, f"fixed: {_seen(ev)}"


CLAIMS = (
    Claim(
        "LC-33",
        "buggy: two job names with one hashtext() block each other (try-lock false, lock waits)",
        ("buggy",),
        _collide,
        published="hashtext('job:daily-invoice'), trả về int4, nên có khả năng va chạm",
    ),
    Claim(
        "LC-33",
        "fixed: their two-key (namespace, id) locks do not",
        ("fixed",),
        _apart,
        published="dùng dạng hai tham số (namespace int4, id int4)",
    ),
)

SCENARIO = Scenario(
    id="advisory-keys",
    doc=__doc__ or "",
    kind="script",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("ok", "lock_busy"),
    claims=CLAIMS,
    published={
        "buggy": "hashtext(...) trả về int4, nên có khả năng va chạm",
        "fixed": "pg_advisory_xact_lock(1, tenant_id)",
    },
    setup=setup,
    defaults=Defaults(n=1, run_timeout_s=60),
    script_connections=lambda n: 2,
    sources=("LC",),
)
