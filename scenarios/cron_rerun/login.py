"""cron-rerun DL-17: the slow login. Case slow-login makes pod-2 log in as a role whose
password has SLOW_SCRAM_ITERATIONS SCRAM iterations (the client computes that PBKDF2 at
every login), case fast-login the same with the server's 4096; the claims judge when
pod-2 arrived against pod-1's job, and what a late pod-2 did."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.core.claims import Claim, NotJudged, Record, mutation
from scenarios.cron_rerun.trials import (
    AFTER_CRASH,
    Trial,
    billed_again,
    first_trial,
    of,
    one_per_key,
    trials_of,
)

# DL-17: a login slow enough (the document's ">100 ms with SCRAM"), against a pod-1 whose
# job (5 customers x SLOW_BILL_PAUSE_MS) outlasts a fast login but not the slow one.
# Both knobs were re-tuned in b44c403 after the fast-login control failed (10 -> 25 ms,
# 500,000 -> 600,000): the claims that judge when pod-2 arrives are fitted to them.
SLOW_SCRAM_ITERATIONS = 600_000  # ~270 ms of client PBKDF2 per login here (idle), more under load


SLOW_LOGIN_MS = 100.0


SLOW_BILL_PAUSE_MS = 25.0


SLOW_LOGIN_TRIALS, SLOW_LOGIN_NEEDED = 3, 2  # both pods bill in at least 2 of 3


_INSIDE = {
    "pod2_connect": "inside",
    "password_auth": True,
    "bill_pause_ms": SLOW_BILL_PAUSE_MS,
    "trials": SLOW_LOGIN_TRIALS,
}


LOGIN_CASES: dict[str, dict[str, Any]] = {  # DL-17: pod-2 logs in inside the race, by SCRAM
    "slow-login": {**_INSIDE, "scram_iterations": SLOW_SCRAM_ITERATIONS},
    "fast-login": {**_INSIDE, "scram_iterations": 4096},
}


def _in_case(rec: Record, case: str) -> bool:
    """The run has `case`'s login settings (its trial count aside)."""
    return all(rec["params"].get(k) == v for k, v in LOGIN_CASES[case].items() if k != "trials")


def _late(t: Trial) -> bool:
    """pod-2 was granted its lock attempt only after pod-1's SIGKILL."""
    return bool(t.pod2.arrived == AFTER_CRASH)


def _pod2_late_and_billed(rec: Record) -> None:
    """What a login too slow for pod-1's job would record: the first trial's pod-2 tried
    after the SIGKILL and billed."""
    kept = first_trial(rec)
    if kept is not None:
        kept["pod2"].update(arrived=AFTER_CRASH, result="billed", inserted=kept["customers"])


def late_pod(variant: str) -> Claim:
    """slow-login, DL-17 as a cause: in the trials where pod-2 tried the lock after pod-1
    was gone, it took the lock too (buggy: and billed every customer again; the fixes: one
    invoice per customer all the same); where it tried in time, it skipped. How many trials
    were late is the fitted knobs' doing; what a late pod-2 does is not."""
    buggy = variant == "buggy"

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        rec = records[variant]
        if not _in_case(rec, "slow-login"):
            return None  # another login: this case's was not exercised
        ts = trials_of(rec)
        ms = [t.pod2.connect_ms for t in ts]
        late = [t for t in ts if _late(t)]
        in_time = [t for t in ts if not _late(t)]
        if not late:
            raise NotJudged(
                f"{variant}@slow-login: pod-2 tried the lock before pod-1's crash in all "
                f"{len(ts)} trials (logins {', '.join(f'{x:.0f}' for x in ms)} ms): no late pod-2"
            )
        ok = [t for t in late if (billed_again(t) if buggy else one_per_key(t))]
        ok = [t for t in ok if t.pod2.result == "billed"]
        skipped = [t for t in in_time if t.pod2.result == "skipped"]
        held = min(ms) >= SLOW_LOGIN_MS and len(ok) == len(late) and len(skipped) == len(in_time)
        did = "billed every customer again" if buggy else "left one invoice per customer"

        def each(key: str) -> str:
            return ", ".join(
                str(t.pod2.inserted if key == "pod2" else getattr(t, key)) for t in late
            )

        return held, (
            f"{variant}@slow-login: pod-2 logged in in {', '.join(f'{x:.0f}' for x in ms)} ms; "
            f"tried the lock after pod-1 was killed in {of(len(late), ts)}, took it and {did} "
            f"in {len(ok)} of them (pod-2 inserted {each('pod2')}; invoices before the retry "
            f"{each('committed_before_retry')}, after it {each('invoices')}); in time in "
            f"{len(in_time)}, skipped in {len(skipped)}"
        )

    if buggy:
        text = (
            f"a pod-2 whose SCRAM login takes >= {SLOW_LOGIN_MS:.0f} ms and so tries the lock"
            " after pod-1 is gone takes it too and bills every customer again"
        )
        published = (
            'hai "pod" đều bill 5, vì pod-2 mất hơn 100 ms để mở connection mới (SCRAM auth)'
        )
    else:
        text = (
            f"{variant}: a pod-2 whose slow SCRAM login brings it after pod-1 is gone takes the"
            " lock too, and UNIQUE + ON CONFLICT keeps one invoice per customer"
        )
        published = "Đây chính là lý do idempotency là fix gốc"
    return Claim(
        "DL-17",
        text,
        (variant,),
        check,
        published,
        cases=("slow-login",),
        unjudged=(
            "that the >100 ms login is why pod-2 is late: here pod-1's job is a tuned knob "
            "(5 x 25 ms), so how often the slow login is late is judged only as fitted",
        ),
    )


def login_timing(case: str) -> Claim:
    """When pod-2 arrives, given its login: slow-login late (both pods bill) in >= 2 of 3
    trials, each login >= 100 ms; fast-login (the server's iterations) in time, skipping.
    FITTED: pod-1's job and the slow role's iterations were chosen (b44c403) for this."""
    slow = case == "slow-login"

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        rec = records["buggy"]
        if not _in_case(rec, case):
            return None  # another setting: this case's login was not exercised
        ts = trials_of(rec)
        both = [t for t in ts if t.pod2.result == "billed"]
        ms = [t.pod2.connect_ms for t in ts]
        if slow:
            late = all(_late(t) for t in both)
            again = [t for t in both if billed_again(t)]  # both pods' invoices in the table
            need = -(-SLOW_LOGIN_NEEDED * len(ts) // SLOW_LOGIN_TRIALS)  # 2 of 3, rounded up
            held = bool(ts) and len(again) >= need and late and min(ms) >= SLOW_LOGIN_MS
        else:  # in time: the lock stops it (its login time is shown)
            held = bool(ts) and not both and not any(_late(t) for t in ts)
        c = rec["evidence"].get("connect", {})
        return held, (
            f"buggy@{case}: pod-2 logged in (scram_iterations={c.get('scram_iterations')}) in "
            f"{', '.join(f'{x:.0f}' for x in ms)} ms; pod-1 billed and died "
            f"{c.get('pod1_killed_ms_p50')} ms (p50) after locking; pod-2 tried the lock "
            f"{', '.join(str(round(t.pod2.arrived_ms)) for t in ts)} ms after pod-1 "
            f"locked ({sum(_late(t) for t in ts)} after the SIGKILL); pod-2 took the lock in "
            f"{of(len(both), ts)}, both pods' invoices in the table in "
            f"{sum(billed_again(t) for t in ts)} (pod-2 inserted "
            f"{', '.join(str(t.pod2.inserted) for t in ts)}; invoices: "
            f"{', '.join(str(t.invoices) for t in ts)})"
        )

    if slow:
        text = (
            f"a pod-2 whose SCRAM login takes >= {SLOW_LOGIN_MS:.0f} ms arrives after pod-1 "
            f"is gone: both pods bill in >= {SLOW_LOGIN_NEEDED} of {SLOW_LOGIN_TRIALS} trials"
        )
        published = (
            'hai "pod" đều bill 5, vì pod-2 mất hơn 100 ms để mở connection mới (SCRAM auth)'
        )
        # the other kind's record (fixed@slow-login): pod-2 late all the same, billing no one
        counterfactual: Any = None
    else:
        text = "the same race with a fast login: pod-2 arrives in time and skips"
        published = ""
        # fixed@fast-login has the same timing: a login that came too late instead
        counterfactual = mutation(
            "buggy",
            _pod2_late_and_billed,
            why="no run sets when pod-2's login ends against the crash: the login's own time does",
        )
    return Claim(
        "DL-17",
        text,
        ("buggy",),
        check,
        published,
        cases=(case,),
        # b44c403 chose SLOW_BILL_PAUSE_MS and SLOW_SCRAM_ITERATIONS so this timing holds
        fitted=True,
        counterfactual=counterfactual,
        timing=True,  # a login is CPU (PBKDF2): a busy machine makes a fast one late
    )
