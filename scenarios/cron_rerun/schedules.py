"""cron-rerun pinned (`locklab trace` / `explore`): pod-1, pod-2 and the Job's retry, each in a
pod.py process of its own, every step of the job a step of the schedule, and pod-1's crash
a step too: SIGKILL, then until the server has ended pod-1's session (and with it the
session's advisory lock, or its open transaction).

The published story: pod-1 takes the lock and bills its 5 customers; pod-2 comes while
pod-1 holds the lock and skips; pod-1 is killed before it unlocks (or commits); the Job
retries it, alone. The slow login (DL-17): pod-2 connects too late, after the crash, and
finds the lock free. Each variant under both: buggy bills twice (10, then 15 invoices),
fixed's UNIQUE key turns the reruns into no-op conflicts (5), fixed-xact-lock rolls the
crashed run back (5). A transcript shows the order, not the timing: `locklab run` races
real pods (choreography.py).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from lab.core.scenario import Env
from lab.pinned.stage import Fault, InProcess, Staged
from scenarios.cron_rerun.cron_rerun import FIXES, Job, pod

POD = Path(__file__).with_name("pod.py")
PODS = ("pod-1", "pod-2", "retry")
CUSTOMERS = 5  # the document's
BILLS = tuple(f"bill-{c}" for c in range(1, CUSTOMERS + 1))
JOB = ("lock", *BILLS, "finish")
STEPS = {v: {"pod-1": ("lock", *BILLS, "crash"), "pod-2": JOB, "retry": JOB} for v in FIXES}
RETRY = ("retry lock", *(f"retry {b}" for b in BILLS), "retry finish")
PUBLISHED = ("pod-1 lock", "pod-2 lock", *(f"pod-1 {b}" for b in BILLS), "pod-1 crash", *RETRY)
SLOW_LOGIN = (
    "pod-1 lock",
    *(f"pod-1 {b}" for b in BILLS),
    "pod-1 crash",
    "pod-2 lock",
    *(f"pod-2 {b}" for b in BILLS),
    "pod-2 finish",
    *RETRY,
)
SCHEDULES = {v: {"published": PUBLISHED, "slow-login": SLOW_LOGIN} for v in FIXES}
NOTES = {
    "published": "pod-2 skips while pod-1 holds the lock; pod-1 dies; the retry runs alone",
    "slow-login": "pod-2 comes after pod-1 died and finds the lock free; then the retry",
}
CRASH = Fault("kill", shown="the server has ended pod-1's session")


def cast(env: Env, variant: str) -> dict[str, InProcess]:
    """Every pod in a process of its own, logged in as the run's user; pod-1 can crash."""
    fix = FIXES[variant]

    def config(name: str) -> dict[str, object]:
        job = Job(name, env.params["customers"], fix.unique, fix.xact_lock)
        return {"dsn": env.dsn, "login": {}, "job": asdict(job), "lazy": False}

    return {
        name: InProcess(POD, config(name), {"crash": CRASH} if name == "pod-1" else {})
        for name in PODS
    }


PINNED = Staged(
    code=dict.fromkeys(FIXES, pod),
    steps=STEPS,
    schedules=SCHEDULES,
    sessions=PODS,
    notes=NOTES,
    params={"customers": CUSTOMERS, "crash_after": CUSTOMERS, "trials": 1},
    processes=cast,
    canonical_only=True,  # three processes' 20 steps: the stories, not every order
)
