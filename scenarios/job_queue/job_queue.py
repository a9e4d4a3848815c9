"""Job queue: workers claim batches with FOR UPDATE SKIP LOCKED and a lease.

Symptom:    without SKIP LOCKED, workers polling one jobs table queue behind each other's
            claim (buggy); with no row lock at all, several run the same jobs (buggy-no-lock).
Root cause: the claim is `SELECT ... ORDER BY run_at LIMIT 10` feeding an UPDATE. FOR UPDATE
            alone makes worker-2 wait for worker-1's claim to commit, then re-check and skip
            its rows: correct, but serialised. With no locking clause worker-2's UPDATE waits
            for worker-1's rows, then updates them again: nothing re-checks the subquery.
Fix:        FOR UPDATE SKIP LOCKED (fixed): a claim skips rows another claim holds, commits at
            once, and the job is held by a lease (locked_until); a worker that dies after its
            claim leaves its jobs 'running' until the lease passes. The price: a row held by a
            stuck transaction is silently invisible to SKIP LOCKED, where FOR UPDATE waits.
Published:  worker-1 claimed [1001, 1002, 1003 ... 1010]; worker-2 claimed [1011, 1012 ... 1020]
            "<- không chờ worker-1, không lấy trùng"; worker-3 claimed [] "<- hết job sẵn sàng,
            ngủ 1s". No timings (PostgreSQL 17.11, Node 24 + node-postgres) — locking-concurrency-
            control.vi.txt, "Job queue với FOR UPDATE SKIP LOCKED"; "SKIP LOCKED che lỗi".
See:        claims LC-16, LC-17 in claims.py; expected/. s1..s3 are worker-1..3. Pinned, each
            takes one turn, its claim in a transaction the schedule commits (in flight: LC-17's
            stuck transaction). As a load each worker loops (claim, run, or sleep poll_ms);
            the `crash` one dies after its first claim, the others take its jobs once its
            lease has passed (judged on PostgreSQL's clock). Code mutants (MUTANTS: the claim
            without SKIP LOCKED, without a row lock, without the lease) run only as
            counterfactuals.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import asyncpg

from lab.core.scenario import Env, executes
from lab.core.steps import Pinned, Session, as_actor, schedule, show_ids, show_sql
from lab.errors import ScenarioFailure

FIRST_JOB = 1001
DRAIN_TIMEOUT_S = 10.0  # on top of the lease: all jobs done by then, or the run failed
SCHEMA = """
CREATE TABLE jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text NOT NULL,
  payload jsonb NOT NULL, status text NOT NULL DEFAULT 'pending', run_at timestamptz NOT NULL
  DEFAULT now(), locked_until timestamptz, attempts int NOT NULL DEFAULT 0, last_error text);
CREATE INDEX jobs_ready_idx ON jobs (run_at) WHERE status IN ('pending', 'running');
CREATE TABLE runs (job_id bigint NOT NULL, worker text NOT NULL,
  at timestamptz NOT NULL DEFAULT clock_timestamp());
"""
schema = executes(SCHEMA)  # once per database; `setup` fills the jobs each run
ENQUEUE = """INSERT INTO jobs (id, kind, payload, run_at) OVERRIDING SYSTEM VALUE
SELECT i, 'email', jsonb_build_object('n', i),
  now() - interval '1 hour' + (i - $1) * interval '1 millisecond'
FROM generate_series($1::bigint, $2::bigint) AS i"""
# CLAIM: the document's; {locking} varies by variant, {expired} only in a code mutant
CLAIM = """
WITH next AS (
  SELECT id FROM jobs
  WHERE (status = 'pending' AND run_at <= now()) OR (status = 'running' AND {expired})
  ORDER BY run_at LIMIT $1 {locking}
)
UPDATE jobs j SET status = 'running', locked_until = now() + $2 * interval '1 millisecond',
  attempts = j.attempts + 1
FROM next WHERE j.id = next.id RETURNING j.id, j.kind, j.attempts
"""
LOCKING = {"buggy": "FOR UPDATE", "buggy-no-lock": "", "fixed": "FOR UPDATE SKIP LOCKED"}  # the fix
EXPIRED = "locked_until < now()"  # the lease: a 'running' job comes back once it has passed
RUN = "INSERT INTO runs (job_id, worker) VALUES ($1, $2)"  # the handler's side effect
DONE = "UPDATE jobs SET status = 'done', locked_until = NULL WHERE id = ANY($1::bigint[])"
NOT_DONE = "SELECT id FROM jobs WHERE status <> 'done' ORDER BY id"
# the leases' end, ms on PostgreSQL's clock, which runs them (the lab's read up to 1 ms short)
LEASE_END = "SELECT min(extract(epoch FROM locked_until)) * 1000 FROM jobs WHERE id = ANY($1)"
CLAIMED = "claimed"
EMPTY = "empty"
DIED = "died"


async def setup(env: Env) -> None:
    await env.db.execute(ENQUEUE, FIRST_JOB, FIRST_JOB + env.params["jobs"] - 1)


async def claim(
    env: Env, s: Session, locking: str, expired: str = EXPIRED, hold_ms: int = 0
) -> list[asyncpg.Record]:
    """The claim, in a transaction of its own: pinned, the schedule decides when it commits.
    `expired` and `hold_ms` (the transaction kept open that long after the claim, under a
    load) are a code mutant's; the variants keep the defaults."""
    sql = CLAIM.format(locking=locking, expired=expired)
    args = (env.params["batch"], env.params["lease_ms"])
    async with s.transaction():
        rows: list[asyncpg.Record] = await s.step(
            "claim", s.conn.fetch, sql, *args, shown=show_sql(sql, args), result=show_ids
        )
        await s.other_logic(hold_ms / 1000)
    return rows


async def handle(s: Session, rows: Sequence[asyncpg.Record]) -> None:
    """Each job's handler: a row in `runs`, its side effect (it touches no job row)."""
    if rows:  # (asyncpg's executemany of nothing leaves the statement open)
        await s.conn.executemany(RUN, [(r["id"], f"worker-{s.index + 1}") for r in rows])


async def turn(env: Env, s: Session, locking: str) -> str:
    """Pinned: one turn of a worker, its claim and its handler's side effect."""
    rows = await claim(env, s, locking)
    await handle(s, rows)
    return CLAIMED if rows else EMPTY


async def worker(
    env: Env, s: Session, locking: str, expired: str = EXPIRED, hold_ms: int = 0
) -> str:
    """The document's loop: claim and run a batch, or sleep poll_ms, until no job is left
    (`expired`, `hold_ms`: a code mutant's claim, as `claim` takes them)."""
    p, me = env.params, f"worker-{s.index + 1}"
    rows = await claim(env, s, locking, expired, hold_ms)
    if me == p["crash"]:  # it dies once its first claim committed: its jobs stay 'running'
        env.add("orphaned", len(rows))
        if (end := await s.conn.fetchval(LEASE_END, [r["id"] for r in rows])) is not None:
            env.sample("orphaned_until_ms", float(end))
        env.trace(me, "dies; its jobs stay 'running'", jobs=show_ids(rows))
        return DIED
    word = CLAIMED if rows else EMPTY
    batch = rows
    nap = p["poll_ms"] / 1000
    for _ in range(int((p["lease_ms"] / 1000 + DRAIN_TIMEOUT_S) / nap) + 1):
        if batch:
            await handle(s, batch)
            await s.conn.execute(DONE, [r["id"] for r in batch])
        elif not await s.conn.fetch(NOT_DONE):
            return word
        else:
            await s.other_logic(nap)  # "hết job sẵn sàng, ngủ 1s": time is the subject
        batch = await claim(env, s, locking, expired, hold_ms)
        back = [r for r in batch if r["attempts"] > 1]
        if back:  # an expired lease: a dead worker's jobs
            env.add("reclaimed", len(back))
            if (end := await s.conn.fetchval(LEASE_END, [r["id"] for r in back])) is not None:
                env.sample("reclaimed_until_ms", float(end))  # less lease_ms: its now()
            env.trace(me, "reclaims expired lease", jobs=show_ids(back))
    left = [r["id"] for r in await s.conn.fetch(NOT_DONE)]
    raise ScenarioFailure(f"{env.scenario} / {env.variant}: jobs {left} never came back")


async def buggy(env: Env, s: Session) -> str:
    return await turn(env, s, LOCKING["buggy"])


async def buggy_no_lock(env: Env, s: Session) -> str:
    return await turn(env, s, LOCKING["buggy-no-lock"])


async def fixed(env: Env, s: Session) -> str:
    return await turn(env, s, LOCKING["fixed"])


# --- code mutants: fixed's claim with one guard dropped, run only as counterfactuals ------
NO_SKIP = "mutant-no-skip-locked"  # FOR UPDATE alone, played on the race schedule
NO_LOCK = "mutant-no-lock"  # no row lock, and a burst's claims overlap (HOLD_MS)
NO_LEASE = "mutant-no-lease"  # SKIP LOCKED, but a 'running' job is taken whatever its lease
# three workers' claims take ~1 ms each and overlap in some runs only: held open this long,
# the burst's claims overlap in every run, as a busy queue's do (SKIP LOCKED would skip).
# Fitted, for the counterfactual only: chosen so that the mutant ran 20 jobs twice in 3 of
# 3 runs here (no claim's own verdict rests on it; the document gives no hold time).
HOLD_MS = 100
MUTANTS = {
    NO_SKIP: as_actor(partial(worker, locking=LOCKING["buggy"])),
    NO_LOCK: as_actor(partial(worker, locking="", hold_ms=HOLD_MS)),
    NO_LEASE: as_actor(partial(worker, locking=LOCKING["fixed"], expired="true")),
}


async def no_skip_locked(env: Env, s: Session) -> str:
    """Pinned, fixed's turn with SKIP LOCKED dropped: buggy's claim, on the race schedule
    (no variant has it: with two claims waiting, which wins is up to the server)."""
    return await turn(env, s, LOCKING["buggy"])


# --- pinned: s1..s3 are worker-1..3, each claims and commits ------------------------------
STEPS = {s: ("claim", "commit") for s in ("s1", "s2", "s3")}
RACE = schedule("s1 claim, s2 claim, s3 claim, s1 commit, s2 commit, s3 commit")  # all in flight
QUEUE = schedule("s1 claim, s2 claim, s1 commit, s3 claim, s2 commit, s3 commit")  # s3 after s1
PINNED = Pinned(
    code={"buggy": buggy, "buggy-no-lock": buggy_no_lock, "fixed": fixed},
    steps={"buggy": STEPS, "buggy-no-lock": STEPS, "fixed": STEPS},
    sessions=("s1", "s2", "s3"),
    # with two claims waiting, which one wins once s1 commits is up to the server: no race
    schedules={v: {"queue": QUEUE} for v in LOCKING} | {"fixed": {"race": RACE, "queue": QUEUE}},
    params={"lease_ms": 5 * 60 * 1000, "crash": ""},  # the document's: no schedule outlasts it
    mutants={NO_SKIP: (no_skip_locked, STEPS)},
    mutant_schedules={NO_SKIP: {"race": RACE}},
)
# as a load: each variant's worker loop, the same claim with the same clause
VARIANTS = {v: as_actor(partial(worker, locking=lk)) for v, lk in LOCKING.items()}
