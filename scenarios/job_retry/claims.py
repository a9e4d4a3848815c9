"""job-retry: what the document claims, how each claim is judged, the evidence, the assembly.

The document (locking-concurrency-control.vi.txt, "Job queue với FOR UPDATE SKIP LOCKED",
PostgreSQL 17.11) gives the failure path as code and no numbers: `const failed =
job.attempts >= 5; ... run_at = now() + (2 ** job.attempts * 10 || ' seconds')`, and warns
"SKIP LOCKED che lỗi: một job bị khoá mãi ... Cần alert trên tuổi của job running lâu nhất."
Every claim is judged on one run per variant: the server's stamps of each attempt of the
poison job, when each healthy job was done, and what the alert query returned.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from lab.core.claims import Claim, Record, on_mutant
from lab.core.scenario import Defaults, Env, Observer, declare
from scenarios.job_retry import job_retry as code
from scenarios.job_retry.job_retry import BACKOFF_UNIT_MS, POISON, STUCK

# The document's number, not the code's constant: the check must not follow the code it judges.
ATTEMPTS = 5  # "const failed = job.attempts >= 5"
MS = "extract(epoch FROM at - (SELECT min(at) FROM job_log)) * 1000"
# Code mutants: the stuck job's claim left uncommitted, its row lock held (the document's
# "transaction treo"); the workers' claim as written, or with plain FOR UPDATE
HUNG_TX = "mutant-hung-tx"
BLOCKING = {"fixed": "mutant-skip-locked-dropped", "buggy": "mutant-buggy-skip-locked-dropped"}


async def nothing(env: Env) -> None:
    pass


async def evidence(env: Env) -> None:
    """After the variant: the poison job's attempts, the healthy jobs' waits, the alert."""
    if "alert" not in env.state:  # the run failed before its alert step: nothing to show
        return
    alert, stuck_ms = env.state["alert"], env.state["stuck_ms"]
    [poison] = await env.db.fetch("SELECT status, attempts FROM jobs WHERE id = $1", POISON)
    tries = await env.db.fetch(
        f"SELECT {MS} AS t FROM job_log WHERE job_id = $1 AND event = 'claimed' ORDER BY at",
        POISON,
    )
    at = [float(r["t"]) for r in tries]
    waits = await env.db.fetch(  # each healthy job: from coming due to done, and when
        f"SELECT extract(epoch FROM l.at - j.run_at) * 1000 AS wait, {MS} AS t"
        " FROM jobs j JOIN job_log l ON l.job_id = j.id AND l.event = 'done'"
        " WHERE j.kind = 'email'"
    )
    env.extra_evidence.update(
        poison={
            "status": poison["status"],
            "attempts": poison["attempts"],
            "at_ms": at[:8],
            "gaps_ms": [round(b - a, 1) for a, b in itertools.pairwise(at)][:8],
        },
        healthy={
            "jobs": code.HEALTHY_JOBS,
            "done": len(waits),
            "max_wait_ms": round(max((float(w["wait"]) for w in waits), default=-1), 1),
            "during_retries": sum(1 for w in waits if at and at[0] < w["t"] < at[-1]),
            "stalled": env.state["stalled"],  # workers still waiting on a lock at the end
        },
        alert={
            "id": alert["id"] if alert else None,
            "running_ms": round(float(alert["running_ms"]), 1) if alert else None,
            "lab_ms": round(stuck_ms, 1),
            "stuck_seen": env.state["stuck_seen"],  # the stuck job's status to the alert
        },
    )


def _poison_failed(records: Mapping[str, Record]) -> tuple[bool, str]:
    p = records["fixed"]["evidence"]["poison"]
    due = [2**a * BACKOFF_UNIT_MS for a in range(1, ATTEMPTS)]
    # Judged from below only (a loaded machine may run an attempt late by any amount): each
    # gap is at least its backoff, and so longer than the backoff before it, which doubles.
    timely = all(g >= d for g, d in zip(p["gaps_ms"], due, strict=False))
    growing = all(g > d for g, d in zip(p["gaps_ms"][1:], due, strict=False))
    held = p["status"] == "failed" and p["attempts"] == ATTEMPTS == len(p["at_ms"])
    return held and timely and growing and len(p["gaps_ms"]) == len(due), (
        f"fixed: poison job {p['status']} after {p['attempts']} attempts; gaps "
        f"{p['gaps_ms']} ms (backoff {due} ms)"
    )


def _retried_forever(records: Mapping[str, Record]) -> tuple[bool, str]:
    p = records["buggy"]["evidence"]["poison"]
    first = sum(p["gaps_ms"][: ATTEMPTS - 1])  # shown, not judged: an upper time bound
    held = p["status"] != "failed" and p["attempts"] > 2 * ATTEMPTS
    return held, (
        f"buggy: poison job still {p['status']} after {p['attempts']} attempts in the "
        f"{code.RUN_WINDOW_MS} ms run (the backoff allows {ATTEMPTS} in "
        f"{code.SCHEDULE_MS} ms); its first {ATTEMPTS} came within {first:.1f} ms"
    )


def _flow(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        h = records[variant]["evidence"]["healthy"]
        # the wait after coming due is shown, not judged: an upper time bound
        held = h["done"] == h["jobs"] and h["during_retries"] > 0
        return held, (
            f"{variant}: {h['done']}/{h['jobs']} healthy jobs done, at most {h['max_wait_ms']} ms "
            f"after coming due; {h['during_retries']} of them between the poison job's attempts; "
            f"{h['stalled']} workers waiting on a lock when the window closed"
        )

    # The flow holds in both variants (the retry policy is the fix, not the flow). Its
    # counterfactual: the stuck job's row lock held by its uncommitted claim, and the workers
    # claiming with plain FOR UPDATE: each waits on that lock, no healthy job is done.
    # (SKIP LOCKED dropped alone stalls nothing: a committed lease keeps the stuck job out of
    # the claim's WHERE, so its row is never locked; with the lock held, SKIP LOCKED skips it.)
    return on_mutant(
        Claim("LC-30", f"{variant}: the other jobs keep flowing", (variant,), check),
        BLOCKING[variant],
    )


def _alert(records: Mapping[str, Record]) -> tuple[bool, str]:
    a = records["fixed"]["evidence"]["alert"]
    at = records["fixed"]["evidence"]["poison"]["at_ms"]
    span = at[-1] - at[0] if at else None  # server clock; the stuck job was claimed before
    # the first attempt and the alert ran after the last, so its age is at least this span
    held = (
        a["id"] == STUCK
        and a["running_ms"] is not None
        and span is not None
        and a["running_ms"] >= span
    )
    return held, (
        f"fixed: oldest running job {a['id']}, running for {a['running_ms']} ms by the alert "
        f"query, at least the {span if span is None else round(span, 1)} ms of the poison job's "
        f"attempts; {a['lab_ms']} ms by the lab's clock since its claim (shown, not judged); "
        f"the stuck job is {a['stuck_seen']!r} to the alert's session"
    )


CLAIMS = (
    Claim(
        "LC-30",
        f"fixed: a poison job is failed after exactly {ATTEMPTS} attempts, each gap at "
        "least 2^attempts × the backoff unit, so longer than the backoff before it",
        ("fixed",),
        _poison_failed,
        published="const failed = job.attempts >= 5; ... 2 ** job.attempts * 10 (seconds)",
    ),
    Claim(
        "LC-30",
        "buggy: retried at once and without a cap, it is never failed and is attempted more "
        f"than {2 * ATTEMPTS} times (the document's path stops at {ATTEMPTS})",
        ("buggy",),
        _retried_forever,
    ),
    _flow("fixed"),
    _flow("buggy"),
    # Both variants run the same alert on the same stuck job, its claim committed. On
    # mutant-hung-tx its claim is never committed (the document's own "transaction treo"):
    # it stays 'pending' to every other session, and the alert, which reads 'running' jobs,
    # does not report it.
    on_mutant(
        Claim(
            "LC-30",
            "fixed: the alert on the oldest running job reports the stuck job, its age at "
            "least the span of the retries that ran while it was stuck",
            ("fixed",),
            _alert,
            published="Cần alert trên tuổi của job running lâu nhất.",
        ),
        HUNG_TX,
    ),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed},
    mutants={
        HUNG_TX: code.hung_tx,
        BLOCKING["fixed"]: code.hung_tx_blocking,
        BLOCKING["buggy"]: code.buggy_hung_tx_blocking,
    },
    outcomes=("done", "failed", "pending", "running"),
    claims=CLAIMS,
    published={"fixed": "failed after 5 attempts, run_at = now() + 2^attempts × 10 s"},
    observers=(Observer("evidence", nothing, evidence),),
    defaults=Defaults(n=1, run_timeout_s=60),
    script_connections=lambda n: code.WORKERS + 1,
    sources=("LC",),
)
