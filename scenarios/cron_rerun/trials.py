"""cron-rerun's trials as a record: each trial's counts summed into counters, samples and
evidence (choreography.py runs them), and the invariant over every trial."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from lab.core.claims import Record
from lab.core.scenario import Check, Env
from scenarios.cron_rerun.cron_rerun import PERIOD, Fix

MAX_TRIALS_KEPT = 200  # per-trial evidence kept in the record


COUNTS = """SELECT coalesce(sum(n), 0)::int AS invoices, count(*)::int AS customers_invoiced,
  coalesce(max(n), 0) AS max_per_key FROM (SELECT customer_id, count(*) AS n FROM invoices
  WHERE period = $1 GROUP BY customer_id) per_key"""


BEFORE_CRASH, AFTER_CRASH = "before the crash", "after the crash"


@dataclass(frozen=True)
class FirstPod:
    billed: int  # customers it billed before the SIGKILL
    connect_ms: float


@dataclass(frozen=True)
class SecondPod:
    result: str  # billed | skipped: what its lock attempt gave
    inserted: int
    conflicts: int
    connect: str  # before | inside: when it connected (the knob pod2_connect)
    connect_ms: float
    arrived_ms: float  # its lock attempt, after pod-1 locked
    arrived: str  # BEFORE_CRASH | AFTER_CRASH: its attempt was granted before the SIGKILL


@dataclass(frozen=True)
class Retry:
    inserted: int
    conflicts: int
    connect_ms: float
    insert_p50_ms: float | None
    conflict_p50_ms: float | None


@dataclass(frozen=True)
class Trial:
    """One trial: pod-1 crashed after `crash_after` customers, pod-2's race, the retry,
    and the table's counts after it."""

    trial: int
    customers: int
    crash_after: int
    pod1: FirstPod
    pod2: SecondPod
    pod1_killed_ms: float  # after it locked
    release_ms: float | None  # SIGKILL -> first poll that saw the lock gone
    pod1_at_crash: dict[str, Any]  # its session at the crash point (pg_stat_activity)
    committed_before_retry: int
    retry: Retry
    invoices: int
    customers_invoiced: int
    max_per_key: int

    def evidence(self) -> dict[str, Any]:
        """The trial as the record keeps it."""
        return asdict(self)

    @classmethod
    def of(cls, kept: Mapping[str, Any]) -> Trial:
        """A trial as the record kept it (``evidence``), typed again."""
        return cls(
            **{
                **kept,
                "pod1": FirstPod(**kept["pod1"]),
                "pod2": SecondPod(**kept["pod2"]),
                "retry": Retry(**kept["retry"]),
            }
        )


async def invariant(env: Env) -> list[Check]:
    """Checked on the table after the last trial, and on every earlier trial's counts; a
    pinned run is one trial, on the table."""
    n = env.params["customers"]
    last = await env.db.fetchrow(COUNTS, PERIOD)
    assert last is not None
    # the table holds the last trial (pinned: the only one): judge it from the table itself
    trials = list(env.extra_evidence.get("trials", [])) or [{"trial": 1}]
    trials[-1] = {**trials[-1], **dict(last)}
    dup = [t for t in trials if t["max_per_key"] > 1]
    missing = [t for t in trials if t["customers_invoiced"] != n]
    shown = (dup or trials)[0]
    twice = (
        f"{len(dup)}/{len(trials)} trials with duplicates; trial {shown['trial']}: "
        f"{shown['invoices']} invoices for {n} customers, up to {shown['max_per_key']} per "
        "(customer, period)"
    )
    all_n = f"{len(trials) - len(missing)}/{len(trials)} trials invoiced all {n} customers"
    return [
        Check("one invoice per (customer, period)", not dup, twice),
        Check("every customer invoiced after the retry", not missing, all_n),
    ]


def p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def summarize(env: Env, fix: Fix, trials: list[Trial], auth: str) -> None:
    for t in trials:
        env.outcome("crashed")
        env.outcome(t.pod2.result)
        env.outcome("billed")  # the retry
        env.add("trials")
        env.add("both_billed", t.pod2.result == "billed")
        env.add("pod1_billed", t.pod1.billed)
        env.add("pod2_billed", t.pod2.inserted)
        env.add("retry_billed", t.retry.inserted)
        env.add("retry_conflicts", t.retry.conflicts)
        env.add("invoices", t.invoices)
        env.add("duplicates", t.invoices - t.customers_invoiced)
        env.sample("pod1_connect_ms", t.pod1.connect_ms)
        env.sample("pod2_connect_ms", t.pod2.connect_ms)
        env.sample("pod2_arrived_ms", t.pod2.arrived_ms)
        env.sample("pod1_killed_ms", t.pod1_killed_ms)
        if t.release_ms is not None:
            env.sample("release_ms", t.release_ms)
    first = trials[0]
    pod1 = f"pod-1: billed {first.pod1.billed} (then SIGKILL"
    pod1 += "; rolled back)" if fix.xact_lock else ")"
    pod2 = "pod-2: " + ("skipped (lock held)" if first.pod2.result == "skipped" else "billed")
    if first.pod2.result == "billed":
        conflicts = f" ({first.pod2.conflicts} conflicts)" if fix.unique else ""
        pod2 += f" {first.pod2.inserted}{conflicts}"
    label = "with UNIQUE(customer_id, period)" if fix.unique else "without unique"
    env.extra_evidence.update(
        lines=[
            f"[ '{pod1}', '{pod2}' ]",
            f"job retry after crash (sequential): billed {first.retry.inserted}",
            f"invoices {label}: {first.invoices}",
        ],
        both_billed=f"{sum(t.pod2.result == 'billed' for t in trials)}/{len(trials)}",
        connect={
            "pod2_connect": env.params["pod2_connect"],
            "auth": auth,
            "scram_iterations": env.params["scram_iterations"] if auth != "trust" else None,
            "pod2_connect_ms_p50": p50([t.pod2.connect_ms for t in trials]),
            "pod2_arrived_ms_p50": p50([t.pod2.arrived_ms for t in trials]),
            "pod1_killed_ms_p50": p50([t.pod1_killed_ms for t in trials]),
        },
        trials=[t.evidence() for t in trials[:MAX_TRIALS_KEPT]],
    )


# --- reading trials, for the claims ----------------------------------------------------


def trials_of(rec: Record) -> list[Trial]:
    return [Trial.of(t) for t in rec.get("evidence", {}).get("trials", [])]


def of(count: int, trials: Sequence[Trial]) -> str:
    return f"{count}/{len(trials)} trials"


def first_trial(rec: Record) -> dict[str, Any] | None:
    """The first trial as the record keeps it, for a counterfactual to edit."""
    return next(iter(rec.get("evidence", {}).get("trials", [])), None)


def billed_again(t: Trial) -> bool:
    """pod-2 took the lock and billed every customer, on top of what pod-1 had committed
    (the table's count before the retry agrees)."""
    return bool(
        t.pod2.result == "billed"
        and t.pod2.inserted == t.customers
        and t.committed_before_retry == t.pod1.billed + t.customers
    )


def one_per_key(t: Trial) -> bool:
    """One invoice per customer before the retry and after it."""
    return (
        t.committed_before_retry <= t.customers and t.invoices == t.customers and t.max_per_key == 1
    )
