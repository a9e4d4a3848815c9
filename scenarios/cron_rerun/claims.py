"""cron-rerun: the claims, and the assembly. How each is judged: rerun.py (DL-15, DL-16,
DL-18, LC-3) and login.py (DL-17).

Every claim is judged on the trials the run records (evidence.trials): each trial is one
race of pod-1 and pod-2, pod-1's SIGKILL after customer k and the Job's retry
(choreography.py). DL-17's slow login is real: case slow-login makes pod-2 log in as a
role whose password has SLOW_SCRAM_ITERATIONS SCRAM iterations (the client computes that
PBKDF2 at every login; the connect time is measured per trial), case fast-login the same
with the server's 4096. -p pod2_connect=inside -p password_auth=true -p trials=50
measures how often both pods bill.

Each claim fails on its counterfactual (lab/verify/counterfactual.py): by default the other
kind's record (buggy <-> fixed, in the same case); the mechanisms every variant shares
(the lock excluding an overlapping pod-2, the fast login's timing) are judged again on
their own record with the quantity they read changed; LC-3's session-lock side on
fixed-xact-lock's record, whose transaction stays open.

Fitted (lab/core/claims.py): after the fast-login control failed (its pod-2 once arrived after
pod-1's 5 x 10 ms job), b44c403 raised SLOW_BILL_PAUSE_MS 10 -> 25 and
SLOW_SCRAM_ITERATIONS 500,000 -> 600,000 so that the fast login lands inside pod-1's job
and the slow one outside it. The two claims whose verdict is that timing (fast-login:
pod-2 in time; slow-login: late in >= 2 of 3 trials) are FITTED. What the document's
sentence says happens once pod-2 is late (it takes the lock and bills again; UNIQUE makes
that a no-op) is judged on the trials where it was late, whatever made it late.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.core.claims import Claim
from lab.core.scenario import Defaults, Param, declare
from lab.errors import LabError
from scenarios.cron_rerun import cron_rerun as code
from scenarios.cron_rerun import schedules
from scenarios.cron_rerun.choreography import variant
from scenarios.cron_rerun.login import (
    LOGIN_CASES,
    late_pod,
    login_timing,
)
from scenarios.cron_rerun.rerun import (
    lock_stops_concurrent,
    rerun_bills_again,
    rerun_walks_all,
    session_lock_no_xact,
    unique_holds,
    xact_held_open,
)
from scenarios.cron_rerun.trials import invariant

FIXES = code.FIXES
CONNECT_MODES = ("before", "inside")
RETRY_CONNECT = ("after", "before")


def validate(n: int, p: Mapping[str, Any]) -> None:
    """What the Params' bounds cannot say: the crash comes within the customers."""
    if p["crash_after"] > p["customers"]:
        raise LabError(
            f"-p crash_after={p['crash_after']}: must be between 0 and customers ({p['customers']})"
        )


CLAIMS = (
    *(lock_stops_concurrent(v) for v in FIXES),
    Claim(
        "DL-16",
        "buggy: the lock alone cannot stop a rerun: invoices > customers, every trial",
        ("buggy",),
        rerun_bills_again,
        published="job retry after crash (sequential): billed 5; invoices without unique: 10",
    ),
    *(unique_holds(v) for v in ("fixed", "fixed-xact-lock")),
    *(late_pod(v) for v in FIXES),
    login_timing("slow-login"),
    login_timing("fast-login"),
    *(rerun_walks_all(v) for v in ("fixed", "fixed-xact-lock")),
    Claim(
        "LC-3",
        "fixed-xact-lock: the job's transaction stays open mid-job (holds the xmin horizon)",
        ("fixed-xact-lock",),
        xact_held_open,
        published="job chạy bao lâu thì transaction mở bấy lâu, giữ xmin horizon và chặn VACUUM",
        unjudged=("chặn VACUUM: no VACUUM is run; the horizon is shown, not compared",),
    ),
    Claim(
        "LC-3",
        "fixed: a session lock holds no transaction between customers",
        ("fixed",),
        session_lock_no_xact,
        # buggy takes the same session lock: the real counterfactual is the xact lock's job
        counterfactual={"fixed": "fixed-xact-lock"},
    ),
)

SCENARIO = declare(
    code,
    validate=validate,
    kind="script",
    variants={name: variant(fix) for name, fix in FIXES.items()},
    mutants={name: variant(fix) for name, fix in code.MUTANTS.items()},
    outcomes=("billed", "skipped", "crashed", "killed"),  # killed: pinned, by the schedule
    claims=CLAIMS,
    published={
        "buggy": "[ 'pod-1: billed 5', 'pod-2: skipped (lock held)' ]; job retry after crash"
        " (sequential): billed 5; invoices without unique: 10",
        "fixed": "run-1: billed 5; job retry after crash (sequential): billed 0;"
        " invoices with UNIQUE(customer_id, period): 5",
    },
    invariant=invariant,
    defaults=Defaults(n=2, run_timeout_s=600),
    # the login cases race a login against pod-1's job: beside real-time runs only, not
    # beside CPU-bound loads (a fast login once took 216 ms there)
    timed=("slow-login", "fast-login"),
    params={
        "customers": Param(5, "customers billed for period 2026-09", min=1),
        "crash_after": Param(
            5, "pod-1 is SIGKILLed after billing this many customers (0..customers)", min=0
        ),
        "trials": Param(1, "concurrent starts (each followed by the crash and the retry)", min=1),
        "pod2_connect": Param(
            "before",
            "before: pod-2's connection is open before the race; inside: "
            "pod-2 opens it when pod-1 has the lock",
            choices=CONNECT_MODES,
        ),
        "password_auth": Param(
            False,
            "pods log in as a throwaway role with its own SCRAM iterations "
            "(else as the lab's user)",
        ),
        "scram_iterations": Param(
            4096, "SCRAM iterations of that role's password (server default 4096)", min=1
        ),
        "bill_pause_ms": Param(
            0.0, "other work per customer (the payment call) while holding the lock", min=0
        ),
        "retry_connect": Param(
            "after",
            "after: the Job's retry starts and logs in after the crash (the "
            "document's); before: it logs in with pod-1 and waits, its login off the clock",
            choices=RETRY_CONNECT,
        ),
    },
    uses=frozenset({"pg"}),
    sources=("DL", "LC"),
    # quick: the retry logs in before the race. No claim reads when it connected (DL-16
    # and DL-18 read what it billed, DL-17 pod-2's login), and with the cases' SCRAM role
    # its login was ~0.3-0.5 s of each slow-login trial's ~1.4-1.8 s, on the clock.
    quick={"trials": 2, "retry_connect": "before"},
    headline={"invoices": "invoices"},
    cases=LOGIN_CASES,
    pinned=schedules.PINNED,
)
