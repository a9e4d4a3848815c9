"""Job queue: workers claim batches with FOR UPDATE SKIP LOCKED and a lease.

Symptom:    without SKIP LOCKED, workers polling the same jobs table queue behind each
            other's claim (buggy), or, with no row lock at all, several workers run the
            same jobs (buggy-no-lock).
Root cause: the claim is `SELECT ... ORDER BY run_at LIMIT 10` feeding an UPDATE. FOR
            UPDATE alone makes worker-2 wait for worker-1's claim to commit, then
            re-check and skip the rows worker-1 took: correct, but serialised. With no
            locking clause worker-2's UPDATE waits for worker-1's rows and then updates
            them again: nothing re-checks the subquery's `status = 'pending'`.
Fix:        FOR UPDATE SKIP LOCKED (fixed): each worker skips the rows another claim
            holds; the claim commits at once and the job is held by a lease
            (locked_until), not by an open transaction. A worker that dies after
            claiming leaves its jobs 'running'; once locked_until passes the same claim
            picks them up again, so handlers must be idempotent. The price: a job row held
            by a stuck transaction is silently invisible to SKIP LOCKED, no error
            anywhere, where a plain FOR UPDATE at least shows up as a lock wait.
Published:  worker-1 claimed [1001, 1002, 1003 ... 1010]; worker-2 claimed [1011, 1012
            ... 1020] "<- không chờ worker-1, không lấy trùng" (does not wait for
            worker-1, takes no duplicate); worker-3 claimed [] "<- hết job sẵn sàng, ngủ 1s"
            (no ready job left, sleep 1 s). No timings (PostgreSQL 17.11, Node 24 +
            node-postgres) — locking-concurrency-control.vi.txt, "Job queue với FOR UPDATE
            SKIP LOCKED"; "SKIP LOCKED che lỗi" in "Edge cases & failure modes".
See:        claims LC-16, LC-17; lab/interleave.py. The document names both failure modes
            of its claim ("không chờ", "không lấy trùng"): buggy drops only SKIP LOCKED
            (the queueing), buggy-no-lock drops the whole locking clause (double claims).

Choreography, the same for every variant (only the claim's locking clause differs):
  1. race: 20 jobs, 1001..1020, enqueued 1 ms apart. Each worker opens a transaction and
     runs the document's claim; it commits only once every later worker has claimed too
     or is reported by the server as waiting on a lock, so the three claims overlap.
  2. death: worker-2's backend is terminated right after its claim committed, before it
     runs a job. The others run their batches, then poll every `poll_ms` and take
     worker-2's jobs once the lease (`lease_ms`; 5 minutes in the document) has passed.
  3. stuck transaction: one more job is enqueued and locked by a session that then hangs
     (idle in transaction); worker-1 claims once. Then the session rolls back and the
     job is claimed and run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from lab.aio import within
from lab.claims import Claim, Record, invariant_broken, invariants_hold
from lab.errors import LabError, ScenarioFailure
from lab.interleave import InterleaveTimeout, done_or_blocked, task_or_blocked
from lab.scenario import Check, Defaults, Env, Scenario

FIRST_JOB = 1001
DRAIN_TIMEOUT_S = 10.0  # on top of the lease: all jobs done by then, or the run failed
TERMINATE_TIMEOUT_S = 5.0

SCHEMA = """
CREATE TABLE jobs (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  kind        text        NOT NULL,
  payload     jsonb       NOT NULL,
  status      text        NOT NULL DEFAULT 'pending',
  run_at      timestamptz NOT NULL DEFAULT now(),
  locked_until timestamptz,
  attempts    int         NOT NULL DEFAULT 0,
  last_error  text
);
CREATE INDEX jobs_ready_idx ON jobs (run_at) WHERE status IN ('pending', 'running');
CREATE TABLE runs (job_id bigint NOT NULL, worker text NOT NULL,
                   at timestamptz NOT NULL DEFAULT clock_timestamp());
"""
ENQUEUE = """
INSERT INTO jobs (id, kind, payload, run_at) OVERRIDING SYSTEM VALUE
SELECT i, 'email', jsonb_build_object('n', i),
       now() - interval '1 hour' + (i - $1) * interval '1 millisecond'
FROM generate_series($1::bigint, $2::bigint) AS i
"""
# The document's claim; only the locking clause differs between the variants.
CLAIM = """
WITH next AS (
  SELECT id FROM jobs
  WHERE (status = 'pending' AND run_at <= now())
     OR (status = 'running' AND locked_until < now())
  ORDER BY run_at
  LIMIT $1
  {locking}
)
UPDATE jobs j
SET status = 'running', locked_until = now() + $2 * interval '1 millisecond',
    attempts = j.attempts + 1
FROM next WHERE j.id = next.id
RETURNING j.id, j.kind, j.attempts
"""
LOCKING = {"buggy": "FOR UPDATE", "buggy-no-lock": "", "fixed": "FOR UPDATE SKIP LOCKED"}
RUN = "INSERT INTO runs (job_id, worker) VALUES ($1, $2)"  # the handler's side effect
DONE = "UPDATE jobs SET status = 'done', locked_until = NULL WHERE id = ANY($1::bigint[])"
NOT_DONE = "SELECT id FROM jobs WHERE status <> 'done' ORDER BY id"
HOLDER = """
SELECT state, (extract(epoch FROM clock_timestamp() - xact_start) * 1000)::float8 AS xact_ms
FROM pg_stat_activity WHERE pid = $1
"""


@dataclass
class Worker:
    name: str
    conn: asyncpg.Connection
    pid: int
    claimed: list[int] = field(default_factory=list)  # in the race
    blocked_by: set[str] = field(default_factory=set)
    started_ms: float = 0.0  # when its race transaction began (≤ the now() of its lease)
    has_claimed: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    died: bool = False


async def setup(env: Env) -> None:
    await env.db.execute(SCHEMA)
    await env.db.execute(ENQUEUE, FIRST_JOB, FIRST_JOB + env.params["jobs"] - 1)


async def buggy(env: Env) -> None:
    await _queue(env, LOCKING["buggy"])


async def buggy_no_lock(env: Env) -> None:
    await _queue(env, LOCKING["buggy-no-lock"])


async def fixed(env: Env) -> None:
    await _queue(env, LOCKING["fixed"])


async def _queue(env: Env, locking: str) -> None:
    p = env.params
    claim = CLAIM.format(locking=locking)
    workers: list[Worker] = []
    try:
        names = [f"worker-{i}" for i in range(1, env.n + 1)]
        opened = await asyncio.gather(
            *(env.connect(server_settings={"application_name": name}) for name in names),
            return_exceptions=True,
        )
        workers = [
            Worker(name, c, c.get_server_pid())
            for name, c in zip(names, opened, strict=True)
            if isinstance(c, asyncpg.Connection)
        ]
        if len(workers) < len(names):
            raise ScenarioFailure(f"{env.scenario}: could not connect every worker: {opened}")
        await _race(env, workers, claim)
        dead = next((w for w in workers if w.name == p["crash"]), None)
        if dead is not None:  # it dies after its claim committed, before running a job
            await _terminate(env, dead.pid)
            dead.died = True
            env.add("died")
            env.add("orphaned", len(dead.claimed))
            env.trace(dead.name, "dies (backend terminated); its jobs stay 'running'")
        live = [w for w in workers if not w.died]
        # Everyone runs its own batch before anyone polls: only the dead worker's lease
        # can expire, however slowly the race went (a live worker's expired lease would be
        # reclaimed under it: the double run the document warns of).
        await asyncio.gather(*(_run_jobs(w, w.claimed) for w in live))
        orphans = set(dead.claimed) if dead else set()
        await asyncio.gather(*(_drain(env, w, claim, orphans, dead) for w in live))
        await _stuck(env, live[0], claim)
    finally:
        for w in workers:
            with contextlib.suppress(Exception):
                await within(w.conn.close(), 2)
            w.conn.terminate()


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["jobs"] < 1 or p["batch"] < 1:
        raise LabError("-p jobs and batch must each be at least 1")
    if p["lease_ms"] < 1 or p["poll_ms"] < 1:
        raise LabError("-p lease_ms and poll_ms must be at least 1")
    names = [f"worker-{i}" for i in range(1, n + 1)]
    if p["crash"] and p["crash"] not in names:
        raise LabError(f"-p crash={p['crash']!r}: one of {', '.join(names)}, or empty for none")
    if p["crash"] and n < 2:
        raise LabError("-p crash needs -n 2 or more: someone must reclaim the jobs")


async def _terminate(env: Env, pid: int) -> None:
    """Kill a worker's backend, as when its process dies, and wait until it is gone."""
    await env.db.execute("SELECT pg_terminate_backend($1)", pid)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TERMINATE_TIMEOUT_S
    while await env.db.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid):
        if loop.time() > deadline:
            raise ScenarioFailure(f"{env.scenario}: backend {pid} outlived pg_terminate_backend")
        await asyncio.sleep(0.002)


# --- 1. the race: every claim in flight at once ---------------------------------------------


async def _race(env: Env, workers: list[Worker], claim: str) -> None:
    """Start the claims one by one, each while every earlier one is still uncommitted;
    commit whoever has claimed once the rest have claimed or block."""
    tasks: list[asyncio.Task[None]] = []
    try:
        for w in workers:
            tasks.append(asyncio.create_task(_claim_and_hold(env, w, claim)))
            await _settle(env, w, workers)
        pending = list(workers)
        while pending:
            for w in pending:
                await _settle(env, w, workers)
            ready = [w for w in pending if w.has_claimed.is_set()]
            if not ready:
                raise InterleaveTimeout(f"{env.scenario}: every claim is blocked")
            for w in ready:  # once worker-1 commits, the queued claims race on: either may win
                w.release.set()
                await tasks[workers.index(w)]
                pending.remove(w)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for w in workers:
        env.outcome("blocked" if w.blocked_by else ("claimed" if w.claimed else "empty"))
        env.extra_evidence.setdefault("lines", []).append(f"{w.name} claimed {_ids(w.claimed)}")
    taken = Counter(j for w in workers for j in w.claimed)
    env.add("double_claimed", sum(1 for n in taken.values() if n > 1))


async def _settle(env: Env, w: Worker, workers: list[Worker]) -> None:
    """Wait until `w` has claimed or the server reports it waiting on another's claim."""
    by = await done_or_blocked(env.db, w.pid, w.has_claimed, what=w.name)
    if by is not None:
        names = {o.name for o in workers if o.pid in by} or {f"pid {b}" for b in by}
        if not names <= w.blocked_by:
            env.trace(w.name, "waits for", blocked_by=sorted(names))
        w.blocked_by |= names


async def _claim_and_hold(env: Env, w: Worker, claim: str) -> None:
    p = env.params
    w.started_ms = env.now_ms()
    async with w.conn.transaction():
        rows = await w.conn.fetch(claim, p["batch"], p["lease_ms"])
        w.claimed = sorted(r["id"] for r in rows)
        env.trace(w.name, "claimed", jobs=_ids(w.claimed))
        w.has_claimed.set()
        await w.release.wait()


def _ids(ids: list[int]) -> str:
    """The document's notation: [1001, 1002, 1003 ... 1010]."""
    if len(ids) > 4 and ids == list(range(ids[0], ids[-1] + 1)):
        return f"[{ids[0]}, {ids[1]}, {ids[2]} ... {ids[-1]}]"
    return "[" + ", ".join(map(str, ids)) + "]"


# --- 2. run, poll, reclaim expired leases ---------------------------------------------------


async def _run_jobs(w: Worker, jobs: list[int]) -> None:
    """Each job's handler (a row in `runs`: its side effect), then status = 'done'; two
    round trips per batch, so a batch runs well inside any lease."""
    if jobs:
        await w.conn.executemany(RUN, [(job, w.name) for job in jobs])
        await w.conn.execute(DONE, jobs)


async def _drain(env: Env, w: Worker, claim: str, orphans: set[int], dead: Worker | None) -> None:
    """The document's worker loop until every job is done: claim (autocommit) and run the
    batch, or sleep `poll_ms` when the claim returns nothing."""
    p = env.params
    loop = asyncio.get_running_loop()
    deadline = loop.time() + p["lease_ms"] / 1000 + DRAIN_TIMEOUT_S
    while True:
        ids = sorted(r["id"] for r in await w.conn.fetch(claim, p["batch"], p["lease_ms"]))
        if ids:
            back = [j for j in ids if j in orphans]
            if back and dead is not None:
                after = env.now_ms() - dead.started_ms
                env.add("reclaimed", len(back))
                env.sample("reclaim_after_ms", after)
                env.trace(w.name, "reclaims expired lease", jobs=_ids(back), after_ms=round(after))
            else:
                env.trace(w.name, "claimed", jobs=_ids(ids))
            await _run_jobs(w, ids)
            continue
        left = await w.conn.fetch(NOT_DONE)
        if not left:
            return
        if loop.time() > deadline:
            raise ScenarioFailure(
                f"{env.scenario} / {env.variant}: jobs {[r['id'] for r in left]} never came back"
            )
        await asyncio.sleep(p["poll_ms"] / 1000)


# --- 3. a job held by a stuck transaction ---------------------------------------------------


async def _stuck(env: Env, w: Worker, claim: str) -> None:
    """One new job, locked by a session that hangs; `w` claims while it hangs, then after."""
    p = env.params
    job = FIRST_JOB + p["jobs"]
    await env.db.execute(ENQUEUE, job, job)
    holder = await env.connect(server_settings={"application_name": "stuck"})
    claiming: asyncio.Task[list[asyncpg.Record]] | None = None
    try:
        await holder.execute("BEGIN")
        await holder.execute("SELECT id FROM jobs WHERE id = $1 FOR UPDATE", job)
        env.trace("stuck", "locks a job, then hangs (idle in transaction)", job=job)
        claiming = asyncio.create_task(w.conn.fetch(claim, p["batch"], p["lease_ms"]))
        by = await task_or_blocked(env.db, w.pid, claiming, what=w.name)
        state = await env.db.fetchrow(HOLDER, holder.get_server_pid())
        assert state is not None
        if by is None:
            seen = sorted(r["id"] for r in claiming.result())
            env.add("invisible_jobs", int(job not in seen))
            env.trace(w.name, "claimed", jobs=_ids(seen), pending=[job])
        else:
            env.add("blocked_on_stuck")
            env.trace(w.name, "waits for", blocked_by=["stuck"])
        env.extra_evidence["stuck"] = {
            "job": job,
            "claim": "returned without it" if by is None else "waited on the holder",
            "holder_state": state["state"],
            "holder_xact_ms": round(state["xact_ms"], 1),
        }
        await holder.execute("ROLLBACK")
        env.trace("stuck", "transaction ends (ROLLBACK)")
        rows = await claiming if by is not None else []
        if by is None:
            rows = await w.conn.fetch(claim, p["batch"], p["lease_ms"])
        ids = sorted(r["id"] for r in rows)
        env.add("claimed_after_holder", ids.count(job))
        env.trace(w.name, "claimed", jobs=_ids(ids))
        await _run_jobs(w, ids)
    finally:
        if claiming is not None and not claiming.done():
            claiming.cancel()
            await asyncio.gather(claiming, return_exceptions=True)
        holder.terminate()


async def invariant(env: Env) -> list[Check]:
    """No job ran twice; every job ran and is done."""
    runs = await env.db.fetch("SELECT job_id, count(*) AS n FROM runs GROUP BY job_id")
    per = {r["job_id"]: r["n"] for r in runs}
    twice = {j: n for j, n in per.items() if n > 1}
    jobs = [r["id"] for r in await env.db.fetch("SELECT id FROM jobs ORDER BY id")]
    left = [r["id"] for r in await env.db.fetch(NOT_DONE)]
    missing = [j for j in jobs if j not in per]
    example = ", ".join(f"{j} ×{n}" for j, n in sorted(twice.items())[:3])
    return [
        Check(
            "no job processed twice",
            not twice,
            f"{len(twice)} jobs ran more than once" + (f" (e.g. {example})" if twice else ""),
        ),
        Check(
            "every job processed",
            not missing and not left,
            f"{len(jobs) - len(missing)}/{len(jobs)} jobs ran; not done: {left or 'none'}",
        ),
    ]


# --- claims ------------------------------------------------------------------------------

PUBLISHED_LINES = (
    "worker-1 claimed [1001, 1002, 1003 ... 1010]",
    "worker-2 claimed [1011, 1012 ... 1020]      <- không chờ worker-1, không lấy trùng",
    "worker-3 claimed []                          <- hết job sẵn sàng, ngủ 1s",
)
PUBLISHED = " / ".join(" ".join(line.split()) for line in PUBLISHED_LINES)
MEASURED_LINES = [  # the same batches in the lab's notation
    "worker-1 claimed [1001, 1002, 1003 ... 1010]",
    "worker-2 claimed [1011, 1012, 1013 ... 1020]",
    "worker-3 claimed []",
]


def _published_claims(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    rec = records["fixed"]
    p = rec["params"]
    if (p["jobs"], rec["knobs"]["n"], p["batch"]) != (20, 3, 10):
        return None  # not the document's setup
    lines = rec["evidence"].get("lines", [])
    no_wait = rec["outcomes"] == {"claimed": 2, "empty": 1}
    return lines == MEASURED_LINES and no_wait, f"fixed: {'; '.join(lines)}; {rec['outcomes']}"


def _queues(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    blocked = rec["outcomes"].get("blocked", 0)
    n = rec["knobs"]["n"]
    return (
        blocked == n - 1,
        f"buggy: {rec['outcomes']} ({blocked} of the {n - 1} later workers waited)",
    )


def _double_claims(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy-no-lock"]
    twice = rec["counters"].get("double_claimed", 0)
    return twice > 0, f"buggy-no-lock: {twice} jobs claimed by more than one worker in the race"


def _reclaimed(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    rec = records["fixed"]
    p, c = rec["params"], rec["counters"]
    orphaned = c.get("orphaned", 0)
    if not p["crash"] or not orphaned:
        return None  # nobody died holding jobs
    got = c.get("reclaimed", 0)
    first = rec["samples"].get("reclaim_after_ms", {}).get("min", 0.0)
    held = got == orphaned and first >= p["lease_ms"]
    return held, (
        f"fixed: {p['crash']} died holding {orphaned} jobs; {got} reclaimed, the first "
        f"{first:.0f} ms after its claim began (lease {p['lease_ms']} ms)"
    )


def _invisible(records: Mapping[str, Record]) -> tuple[bool, str]:
    fix, bug = records["fixed"], records["buggy"]
    s = fix["evidence"].get("stuck", {})
    hidden = fix["counters"].get("invisible_jobs", 0)
    later = fix["counters"].get("claimed_after_holder", 0)
    waited = bug["counters"].get("blocked_on_stuck", 0)
    held = hidden == 1 and "blocked_on_stuck" not in fix["counters"] and later == 1 and waited == 1
    return held, (
        f"fixed: job {s.get('job')} pending, claim {s.get('claim')} while the holder was "
        f"{s.get('holder_state')!r} for {s.get('holder_xact_ms')} ms, no error; claimed once "
        f"it ended: {later}. buggy (FOR UPDATE): the claim waited on the holder: {waited}"
    )


CLAIMS = (
    Claim(
        "LC-16",
        "SKIP LOCKED: worker-1 takes 1001..1010, worker-2 1011..1020 without waiting, worker-3 none",
        ("fixed",),
        _published_claims,
        PUBLISHED,
    ),
    invariants_hold("LC-16", "fixed", "SKIP LOCKED: no job run twice, every job run"),
    Claim(
        "LC-16",
        "Without SKIP LOCKED, every later worker queues behind the claim in flight",
        ("buggy",),
        _queues,
        "không chờ worker-1",
    ),
    Claim(
        "LC-16",
        "With no row lock the overlapping claims take the same jobs",
        ("buggy-no-lock",),
        _double_claims,
        "không lấy trùng",
    ),
    invariant_broken(
        "LC-16",
        "buggy-no-lock",
        "no job processed twice",
        "... and the survivors run them twice",
        "không lấy trùng",
    ),
    Claim(
        "LC-16",
        "A worker that dies after claiming: its jobs are reclaimed once locked_until passes",
        ("fixed",),
        _reclaimed,
        "khi locked_until hết hạn, câu claim sẽ nhặt lại nó",
    ),
    Claim(
        "LC-17",
        "A job held by a stuck transaction is silently invisible to SKIP LOCKED "
        "(FOR UPDATE waits on it instead)",
        ("buggy", "fixed"),
        _invisible,
        'một job bị khoá mãi (transaction treo) đơn giản là "vô hình" với worker khác, '
        "không có lỗi nào",
    ),
)

SCENARIO = Scenario(
    id="job-queue",
    validate=validate,
    doc=__doc__ or "",
    kind="script",
    script_connections=lambda n: n + 1,  # the workers and a stuck holder
    variants={"buggy": buggy, "buggy-no-lock": buggy_no_lock, "fixed": fixed},
    outcomes=("claimed", "empty", "blocked"),
    claims=CLAIMS,
    published={
        "fixed": PUBLISHED,
        "buggy": "(not shown) 'không chờ worker-1': without SKIP LOCKED worker-2 would wait",
        "buggy-no-lock": "(not shown) 'không lấy trùng': without a lock workers take the same jobs",
    },
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=3, actor_timeout_s=30, run_timeout_s=60),
    params={"jobs": 20, "batch": 10, "lease_ms": 100, "poll_ms": 20, "crash": "worker-2"},
    param_help={
        "jobs": "jobs enqueued, ids from 1001 (published: 20, so worker-3 finds none)",
        "batch": "LIMIT of the claim",
        "lease_ms": "locked_until = now() + lease (the document: 5 minutes)",
        "poll_ms": "a worker's sleep when its claim returns nothing (the document: 1 s)",
        "crash": "the worker whose backend is terminated right after its claim; empty: none",
    },
    sources=("LC",),
)
