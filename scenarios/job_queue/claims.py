"""job-queue: what the documents claim, how each claim is judged, and the assembly.

Who waits for whom, and which jobs each claim took, are judged on pinned schedules and
on every interleaving of the three workers' claims (`locklab explore job-queue`): race
(all three claims in flight, then the commits; fixed only, since with two claims waiting
on worker-1 which one wins once it commits is up to the server) and queue (worker-3
claims after worker-1 committed, while worker-2 is in flight). The load (`locklab run`)
judges what only time shows: a dead worker's jobs come back once its lease passes, and
no job runs twice meanwhile.
The checks on the canonical schedules are in explored.py, the reclaim's in reclaim.py.

Not judged any more (listed as unjudged): the old script's LC-17 check that the hidden
job is claimed once the stuck holder rolls back (the pinned sessions are three workers,
no rollback).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lab.core.claims import Claim, invariants_hold, on_mutant
from lab.core.scenario import Check, Defaults, Env, Param, declare
from lab.errors import LabError
from lab.pinned import broke_in_some, canonical, kept_in_all, on_canonical, waited_in
from scenarios.job_queue import explored, reclaim
from scenarios.job_queue import job_queue as code

# re-exported: the job-queue tests read the batches from here
from scenarios.job_queue.explored import MEASURED_LINES as MEASURED_LINES
from scenarios.job_queue.explored import claimed as claimed

PUBLISHED_LINES = (
    "worker-1 claimed [1001, 1002, 1003 ... 1010]",
    "worker-2 claimed [1011, 1012 ... 1020]      <- không chờ worker-1, không lấy trùng",
    "worker-3 claimed []                          <- hết job sẵn sàng, ngủ 1s",
)
PUBLISHED = " / ".join(" ".join(line.split()) for line in PUBLISHED_LINES)
NO_WAIT, NO_DUP = "không chờ worker-1", "không lấy trùng"
INVISIBLE = (
    'một job bị khoá mãi (transaction treo) đơn giản là "vô hình" với worker khác, không có lỗi nào'
)
RECLAIM = "khi locked_until hết hạn, câu claim sẽ nhặt lại nó"


def validate(n: int, p: Mapping[str, Any]) -> None:
    names = [f"worker-{i}" for i in range(1, n + 1)]
    if p["crash"] and p["crash"] not in names:
        raise LabError(f"-p crash={p['crash']!r}: one of {', '.join(names)}, or empty for none")
    if p["crash"] and n < 2:
        raise LabError("-p crash needs -n 2 or more: someone must reclaim the jobs")


async def invariant(env: Env) -> list[Check]:
    """No job ran twice; every job ran and none is left pending."""
    rows = await env.db.fetch("SELECT job_id, count(*) AS n FROM runs GROUP BY job_id")
    per = {r["job_id"]: r["n"] for r in rows}
    twice = {j: n for j, n in per.items() if n > 1}
    jobs = [r["id"] for r in await env.db.fetch("SELECT id FROM jobs ORDER BY id")]
    waiting = await env.db.fetch("SELECT id FROM jobs WHERE status = 'pending' ORDER BY id")
    pending = [r["id"] for r in waiting]
    missing = [j for j in jobs if j not in per]
    example = ", ".join(f"{j} ×{n}" for j, n in sorted(twice.items())[:3])
    ran = f"{len(jobs) - len(missing)}/{len(jobs)} jobs ran; pending: {pending or 'none'}"
    return [
        Check(
            "no job processed twice",
            not twice,
            f"{len(twice)} jobs ran more than once" + (f" (e.g. {example})" if twice else ""),
        ),
        Check("every job processed", not missing and not pending, ran),
    ]


QUEUE = {"s1": code.CLAIMED, "s2": code.CLAIMED, "s3": code.EMPTY}

CLAIMS = (
    # buggy has no race schedule (which waiting claim wins is up to the server): the
    # counterfactual is mutant-no-skip-locked, fixed's claim as FOR UPDATE alone, on it
    on_mutant(
        on_canonical(
            "LC-16",
            "fixed",
            "race",
            "SKIP LOCKED: worker-1 takes 1001..1010, worker-2 1011..1020 without waiting, "
            "worker-3 none",
            explored._published,
            published=PUBLISHED,
        ),
        code.NO_SKIP,
    ),
    # buggy (FOR UPDATE) keeps them too, and buggy-no-lock's load only when its claims of
    # ~1 ms happen to overlap (1 run of 3 here): mutant-no-lock drops the row lock and holds
    # each claim's transaction open HOLD_MS, so the burst's claims overlap in every run
    on_mutant(
        invariants_hold(
            "LC-16",
            "fixed",
            "SKIP LOCKED: no job run twice, every job run, a dead worker's jobs included",
            counterfactual=None,
        ),
        code.NO_LOCK,
    ),
    kept_in_all(
        "LC-16",
        "fixed",
        "SKIP LOCKED: no interleaving of three claims runs a job twice or leaves one behind",
        published=NO_DUP,
        counterfactual={"fixed": "buggy-no-lock"},  # buggy (FOR UPDATE) keeps them too
    ),
    waited_in(
        "LC-16",
        "fixed",
        "SKIP LOCKED: no claim waits in any interleaving",
        expect=False,
        published=NO_WAIT,
    ),
    canonical(
        "LC-16",
        "buggy",
        "queue",
        "Without SKIP LOCKED, every later worker queues behind the claim in flight",
        outcomes=QUEUE,
        waited=("s2 claim", "s3 claim"),
        kept=True,
        published=NO_WAIT,
    ),
    waited_in(
        "LC-16",
        "buggy",
        "Without SKIP LOCKED some interleavings make a claim wait",
        expect=True,
        published=NO_WAIT,
    ),
    kept_in_all(
        "LC-16",
        "buggy",
        "FOR UPDATE alone is correct, only serialised: no interleaving runs a job twice",
        counterfactual={"buggy": "buggy-no-lock"},  # the row lock dropped
    ),
    on_canonical(
        "LC-16",
        "buggy-no-lock",
        "queue",
        "With no row lock the overlapping claims take the same jobs",
        explored._same_jobs,
        published=NO_DUP,
    ),
    on_canonical(
        "LC-16",
        "buggy-no-lock",
        "queue",
        "... and the survivors run them twice",
        explored._ran_twice,
        published=NO_DUP,
    ),
    broke_in_some(
        "LC-16",
        "buggy-no-lock",
        "With no row lock some interleavings run a job twice or leave one behind",
        published=NO_DUP,
    ),
    # every variant claims with the same lease: the counterfactual is mutant-no-lease, whose
    # claim takes a 'running' job whatever its locked_until (the dead worker's at once)
    on_mutant(
        Claim(
            "LC-16",
            "A worker that dies after claiming: its jobs are reclaimed once locked_until passes",
            ("fixed",),
            reclaim._reclaimed,
            RECLAIM,
            cases=("crash",),
        ),
        code.NO_LEASE,
    ),
    # buggy has no race schedule: mutant-no-skip-locked plays it, s3 waiting on the stuck claims
    replace(
        on_mutant(
            on_canonical(
                "LC-17",
                "fixed",
                "race",
                "Jobs held by a stuck (idle in transaction) claim are silently invisible to "
                "SKIP LOCKED: no wait, no error",
                explored._invisible,
                published=INVISIBLE,
            ),
            code.NO_SKIP,
        ),
        unjudged=("the hidden job is claimed once the stuck holder rolls back",),
    ),
    canonical(
        "LC-17",
        "buggy",
        "queue",
        "FOR UPDATE waits on the transaction holding the jobs instead",
        outcomes=QUEUE,
        waited=("s3 claim",),
        kept=True,
        published=INVISIBLE,
    ),
)

SCENARIO = declare(
    code,
    validate=validate,
    kind="actors",
    variants=code.VARIANTS,
    outcomes=(code.CLAIMED, code.EMPTY, code.DIED),
    claims=CLAIMS,
    mutants=code.MUTANTS,
    published={
        "fixed": PUBLISHED,
        "buggy": "(not shown) 'không chờ worker-1': without SKIP LOCKED worker-2 would wait",
        "buggy-no-lock": "(not shown) 'không lấy trùng': without a lock workers take the same jobs",
    },
    invariant=invariant,
    defaults=Defaults(n=3, arrival="burst", actor_timeout_s=30, run_timeout_s=60),
    params={
        "jobs": Param(
            20, "jobs enqueued, ids from 1001 (published: 20, so worker-3 finds none)", min=1
        ),
        "batch": Param(10, "LIMIT of the claim", min=1),
        "lease_ms": Param(
            1000,
            "locked_until = now() + lease (the document: 5 minutes; pinned runs use it)",
            min=1,
        ),
        "poll_ms": Param(
            20, "a worker's sleep when its claim returns nothing (the document: 1 s)", min=1
        ),
        "crash": Param(
            "worker-2", "the worker that dies right after its first claim committed; empty: none"
        ),
    },
    sources=("LC",),
    # 10 jobs for each worker's first claim, so the dying worker-2 holds a batch however the
    # three claims of a burst come in (with 20, the last claim finds none)
    cases={"crash": {"jobs": 30, "crash": "worker-2"}},
)
