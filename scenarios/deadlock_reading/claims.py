"""deadlock-reading: what the documents claim, how each claim is judged, the documents'
monitoring queries (an observer), and the assembly.

Published: "'Waits for ShareLock on transaction X' nghĩa là: tôi cần update một tuple mà
transaction X đang giữ row lock ... Ghép lại"; "Production: bật log_lock_waits = on, alert
theo số 40P01/phút, và invariant query định kỳ (invoice trùng theo (customer, period))" —
deadlock-distributed-lock-cron.vi.txt; "Cần alert trên tuổi của job running lâu nhất" —
locking-concurrency-control.vi.txt ("Gotchas"). After each run the observer runs those
monitoring queries as a periodic check would: pg_stat_database.deadlocks per minute,
duplicate invoices, the oldest running job.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from lab.aio import until
from lab.core.claims import Claim, Record
from lab.core.scenario import Defaults, Env, Observer, declare
from scenarios.deadlock_reading import deadlock_reading as code

STATS_SETTLE_S = 10.0  # the victim's count reaches pg_stat_database when its backend flushes
DEADLOCKS = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
DUPLICATES = """SELECT customer_id, period, count(*) AS n FROM invoices
GROUP BY customer_id, period HAVING count(*) > 1 ORDER BY customer_id"""
OLDEST_RUNNING = """SELECT id, customer_id,
  round(extract(epoch FROM now() - started_at) * 1000)::int AS age_ms
FROM jobs WHERE status = 'running' ORDER BY started_at LIMIT 1"""


async def start(env: Env) -> None:
    env.state.update(deadlocks_before=int(await env.db.fetchval(DEADLOCKS)), t0=time.monotonic())


async def stop(env: Env) -> None:
    """The documents' three monitoring queries, as a periodic check would run them."""
    if "pids" not in env.state:  # the run failed before its jobs connected
        return
    expected = env.outcomes.get("40P01", 0)

    async def counted() -> list[int]:  # [the count] once it is in (a list: 0 is an answer)
        await env.db.execute("SELECT pg_stat_clear_snapshot()")
        delta = int(await env.db.fetchval(DEADLOCKS)) - env.state["deadlocks_before"]
        return [delta] if delta >= expected else []

    [delta] = await until(counted, STATS_SETTLE_S, "the deadlock counted in pg_stat_database")
    minutes = (time.monotonic() - env.state["t0"]) / 60
    oldest = await env.db.fetchrow(OLDEST_RUNNING)
    monitoring: dict[str, Any] = {
        "deadlocks": delta,
        "deadlocks_per_minute": round(delta / minutes, 1),
        "duplicate_invoices": [dict(r) for r in await env.db.fetch(DUPLICATES)],
        "oldest_running_job": dict(oldest) if oldest else None,
    }
    env.extra_evidence.update(
        pids=env.state["pids"], snapshot=env.state.get("snapshot", []), monitoring=monitoring
    )


def _chain(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    ev = records["buggy"]["evidence"]
    if ev.get("deadlocks") is None:
        return None  # the lab cannot read this server's log (an external server)
    snap = {(s["waiter"], s["mode"], s["on"], s["holder"]) for s in ev["snapshot"]}
    report = (ev.get("deadlocks") or {}).get("example") or {}
    named = {(w["pid"], w["mode"], w["on"], w["blocked_by"]) for w in report.get("waits", [])}
    edges = {w: h for w, _, _, h in snap}
    cycle = len(edges) == 2 and all(edges.get(h) == w for w, h in edges.items())
    return cycle and snap == named, (
        f"buggy: pg_locks waiter -> holder {sorted(snap)}; the server's report named "
        f"{sorted(named)}"
    )


def _log(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    rec = records["buggy"]
    if rec["evidence"].get("deadlocks") is None:
        return None  # no server log to read
    j1, j2 = rec["evidence"]["pids"]
    lines = [(w["pid"], w["event"], w["on"]) for w in rec["evidence"].get("lock_waits", [])]
    still = next(
        ((i, o) for i, (p, e, o) in enumerate(lines) if (p, e) == (j1, "still waiting")), None
    )
    acquired = still is not None and (j1, "acquired", still[1]) in lines[still[0] :]
    held = acquired and any(p == j2 and e == "detected deadlock" for p, e, _ in lines)
    return held, "buggy log: " + "; ".join(f"{p} {e} ShareLock on {o}" for p, e, o in lines)


def _monitor(variant: str, finds: bool) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        m = records[variant]["evidence"]["monitoring"]
        found = [
            m["deadlocks"] > 0,
            bool(m["duplicate_invoices"]),
            m["oldest_running_job"] is not None,
        ]
        return (all(found) if finds else not any(found)), (
            f"{variant}: deadlocks +{m['deadlocks']} ({m['deadlocks_per_minute']}/min), "
            f"duplicate invoices {m['duplicate_invoices']}, oldest running job "
            f"{m['oldest_running_job']}"
        )

    what = (
        "find the deadlock, the duplicate invoice and the job left running"
        if finds
        else "find nothing"
    )
    return Claim(
        "DL-23",
        f"{variant}: the monitoring queries {what}",
        (variant,),
        check,
        published="alert theo số 40P01/phút, và invariant query định kỳ" if finds else "",
    )


CLAIMS = (
    Claim(
        "DL-22",
        "During the deadlock, pg_locks shows each waiter's ungranted transactionid lock and "
        "its holder; the pairs form the cycle the server's report then names",
        ("buggy",),
        _chain,
        published="Waits for ShareLock on transaction X ... Ghép lại",
    ),
    Claim(
        "DL-23",
        "buggy, log_lock_waits = on: the log has 'still waiting for ShareLock on transaction "
        "…' then 'acquired' for the survivor, and the victim's 'detected deadlock'",
        ("buggy",),
        _log,
        published="bật log_lock_waits = on",
    ),
    _monitor("buggy", True),
    _monitor("fixed", False),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed},
    outcomes=("ok", "40P01", "rerun ok"),
    claims=CLAIMS,
    published={
        "buggy": "log_lock_waits, 40P01/phút, invoice trùng theo (customer, period)",
        "fixed": "sorted SKUs + UNIQUE (customer_id, period)",
    },
    observers=(Observer("monitoring", start, stop),),
    defaults=Defaults(n=2, run_timeout_s=60),
    sources=("DL", "LC"),
    script_connections=lambda n: 2,
)
