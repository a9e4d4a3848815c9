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
See:        claim LC-33 in claims.py; expected/ has the schedule's transcripts. The colliding
            pair was found on this lab's PostgreSQL 17.10 by a birthday search (COLLIDING).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.core.scenario import Check, Env
from lab.core.steps import Pinned, Session
from lab.errors import LabError

# Two job names with the same hashtext(), found by a birthday search on the server:
#   SELECT h, array_agg(name) FROM (SELECT 'job:report-' || i AS name,
#     hashtext('job:report-' || i) AS h FROM generate_series(1, 300000) i) s
#   GROUP BY h HAVING count(*) > 1
# 300,000 names gave 8 pairs (0.56 s); this one has both names below 110,000.
COLLIDING = ("job:report-63270", "job:report-105574")  # job A (s1), job B (s2)
COLLIDING_HASH = 527789554
NAMESPACE_JOBS = 1  # the two-key form's first key: "jobs" (the document's 1 = balances)
ONE_KEY = "hashtext($1)"
TWO_KEYS = f"{NAMESPACE_JOBS}, (SELECT id FROM job_names WHERE name = $1)"
HELD = (
    "SELECT classid::int, objid::int, objsubid::int FROM pg_locks"
    " WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
)
COLLIDE = "the two job names share one hashtext()"
APART = "an unrelated job never refuses job B's try-lock"


def validate(n: int, p: Mapping[str, Any]) -> None:
    if n != len(COLLIDING):
        raise LabError(f"advisory-keys runs two jobs, A and B: -n {len(COLLIDING)}")


async def schema(env: Env) -> None:
    await env.db.execute("CREATE TABLE job_names (id int PRIMARY KEY, name text UNIQUE NOT NULL)")


async def setup(env: Env) -> None:
    await env.db.executemany("INSERT INTO job_names VALUES ($1, $2)", list(enumerate(COLLIDING, 1)))


async def _job(s: Session, key: str) -> str:
    """Job A (s1) takes its lock and holds it; job B (s2) try-locks its own, then waits."""
    name = COLLIDING[s.index]
    async with s.transaction():
        if s.index == 0:
            await s.execute("hold", f"SELECT pg_advisory_xact_lock({key})", name)
            await s.fetch("locks", HELD)  # what pg_locks shows of A's lock
            return "ok"
        got = await s.fetchval("try", f"SELECT pg_try_advisory_xact_lock({key})", name)
        await s.execute("lock", f"SELECT pg_advisory_xact_lock({key})", name)  # waits, or not
    return "ok" if got else "lock_busy"


async def buggy(env: Env, s: Session) -> str:
    return await _job(s, ONE_KEY)


async def fixed(env: Env, s: Session) -> str:
    return await _job(s, TWO_KEYS)  # the whole fix: the key


async def invariant(env: Env) -> list[Check]:
    a, b = COLLIDING
    ha, hb = await env.db.fetchrow("SELECT hashtext($1), hashtext($2)", a, b) or (None, None)
    refused = env.outcomes.get("lock_busy", 0)
    return [
        Check(
            COLLIDE, ha == hb == COLLIDING_HASH, f"hashtext({a!r}) = {ha}, hashtext({b!r}) = {hb}"
        ),
        Check(APART, refused == 0, f"try-locks refused: {refused}"),
    ]


# --- pinned: B asks while A holds, the order the document warns about --------------------

STEPS = {"s1": ("hold", "locks", "commit"), "s2": ("try", "lock", "commit")}
B_WHILE_A_HOLDS = ("s1 hold", "s1 locks", "s2 try", "s2 lock", "s1 commit", "s2 commit")
PINNED = Pinned(
    code={"buggy": buggy, "fixed": fixed},
    steps={"buggy": STEPS, "fixed": STEPS},
    schedules={
        "buggy": {"b-while-a-holds": B_WHILE_A_HOLDS},
        "fixed": {"b-while-a-holds": B_WHILE_A_HOLDS},
    },
)
