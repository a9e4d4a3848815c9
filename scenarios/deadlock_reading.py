"""Deadlock reading: pg_locks, log_lock_waits and the monitoring queries around one deadlock.

Symptom:    a billing run deadlocked overnight: one job was retried and billed a customer
            twice, its first attempt is still "running", and all that is left to go on is the
            server log and a few catalog views.
Root cause: two billing jobs reserve the same two SKUs in opposite order (one per cart);
            the job writes its invoice before the checkout transaction, the deadlock victim's
            job is rerun by the scheduler and writes a second invoice (no UNIQUE), and the
            failed attempt's job row is never marked done.
Fix:        sort the SKUs (no cycle) and `UNIQUE (customer_id, period)` with ON CONFLICT DO
            NOTHING (fixed): no deadlock, no duplicate, nothing left running.
Published:  "'Waits for ShareLock on transaction X' nghĩa là: tôi cần update một tuple mà
            transaction X đang giữ row lock ... Ghép lại"; "Production: bật log_lock_waits =
            on, alert theo số 40P01/phút, và invariant query định kỳ (invoice trùng theo
            (customer, period))" — deadlock-distributed-lock-cron.vi.txt; "Cần alert trên tuổi
            của job running lâu nhất" — locking-concurrency-control.vi.txt ("Gotchas")
See:        claims DL-22, DL-23. Both jobs' sessions SET log_lock_waits = on and
            deadlock_timeout = 500 ms (superuser settings; the window in which the lab reads
            pg_locks). Forced order: j1 takes its first SKU, j2 its first, j1 asks for its
            second; j2's "other logic" lasts until the server shows j1 waiting longer than
            deadlock_timeout (time is the subject: the log's threshold), so j1's check finds
            no cycle and logs "still waiting"; then j2 asks for its second SKU, the lab waits
            until both are blocked and snapshots pg_locks; j2's check finds the cycle (j2 is
            the victim), j1 logs "acquired". After the run the document's monitoring queries
            run: pg_stat_database.deadlocks per minute, duplicate invoices, oldest running job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import asyncpg

from lab.claims import Claim, Record
from lab.interleave import (
    POLL_S,
    TIMEOUT_S,
    InterleaveTimeout,
    done_or_blocked,
    lock_waiters,
    task_or_blocked,
)
from lab.scenario import Defaults, Env, Scenario

SKUS = ("A-1", "B-2")
PERIOD = "2026-11"
DEADLOCK_TIMEOUT_MS = 500
STATS_SETTLE_S = 3.0
LOG_AFTER = 1.5  # j1 must have waited this many deadlock_timeouts: its "still waiting" is out
SESSION = {"log_lock_waits": "on", "deadlock_timeout": f"{DEADLOCK_TIMEOUT_MS}ms"}
SNAPSHOT = """
SELECT w.pid AS waiter, w.mode, 'transaction ' || w.transactionid AS on, h.pid AS holder
FROM pg_locks w JOIN pg_locks h ON h.locktype = 'transactionid'
  AND h.transactionid = w.transactionid AND h.granted
WHERE w.locktype = 'transactionid' AND NOT w.granted AND w.pid = ANY($1::int[])
ORDER BY w.pid
"""
WAITED_MS = """SELECT extract(epoch FROM clock_timestamp() - waitstart) * 1000
FROM pg_locks WHERE pid = $1 AND NOT granted AND waitstart IS NOT NULL"""
DEADLOCKS = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
DUPLICATES = """SELECT customer_id, period, count(*) AS n FROM invoices
GROUP BY customer_id, period HAVING count(*) > 1 ORDER BY customer_id"""
OLDEST_RUNNING = """SELECT id, customer_id,
  round(extract(epoch FROM now() - started_at) * 1000)::int AS age_ms
FROM jobs WHERE status = 'running' ORDER BY started_at LIMIT 1"""


async def setup(env: Env) -> None:
    await env.db.execute(
        "CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL);"
        "CREATE TABLE invoices (id serial PRIMARY KEY, customer_id int NOT NULL, period text NOT NULL);"
        "CREATE TABLE jobs (id serial PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL,"
        " started_at timestamptz NOT NULL DEFAULT now())"
    )
    await env.db.executemany("INSERT INTO stock VALUES ($1, 1000)", [(s,) for s in SKUS])


async def bill(conn: asyncpg.Connection, customer: int, cart: tuple[str, ...], fix: bool,
               first_done: asyncio.Event, go: asyncio.Event) -> str:  # fmt: skip
    """One billing job: job row, invoice, reserve the cart's SKUs, job done."""
    job = await conn.fetchval(  # step start: the job row, committed
        "INSERT INTO jobs (customer_id, status) VALUES ($1, 'running') RETURNING id", customer
    )
    await conn.execute(  # step invoice: committed before the checkout, as the job does
        "INSERT INTO invoices (customer_id, period) VALUES ($1, $2)"
        + (" ON CONFLICT (customer_id, period) DO NOTHING" if fix else ""),
        customer, PERIOD,
    )  # fmt: skip
    async with conn.transaction():
        skus = sorted(cart) if fix else cart
        await conn.execute("UPDATE stock SET qty = qty - 1 WHERE sku = $1", skus[0])  # step first
        first_done.set()
        await go.wait()  # the job's other logic; the lab decides when it ends
        await conn.execute("UPDATE stock SET qty = qty - 1 WHERE sku = $1", skus[1])  # step second
    await conn.execute("UPDATE jobs SET status = 'done' WHERE id = $1", job)  # step done
    return "ok"


async def _attempt(conn: asyncpg.Connection, *args: Any) -> str:
    try:
        return await bill(conn, *args)
    except asyncpg.PostgresError as exc:
        return str(exc.sqlstate)


async def _waited_ms(env: Env, pid: int, ms: float) -> None:
    """Until the server shows `pid` waiting on a lock for at least `ms`."""
    for _ in range(int(TIMEOUT_S / POLL_S)):
        if (await env.db.fetchval(WAITED_MS, pid) or 0) >= ms:
            return
        await asyncio.sleep(POLL_S)
    raise InterleaveTimeout(f"pid {pid} did not wait {ms} ms on a lock")


async def _run(env: Env, fix: bool) -> None:
    if fix:  # the schema half of the fix
        await env.db.execute("ALTER TABLE invoices ADD UNIQUE (customer_id, period)")
    before = await env.db.fetchval(DEADLOCKS)
    t0 = time.monotonic()
    conns = [await env.connect(server_settings=SESSION) for _ in (0, 1)]
    pids = [c.get_server_pid() for c in conns]
    firsts, gos = [asyncio.Event(), asyncio.Event()], [asyncio.Event(), asyncio.Event()]
    carts = (SKUS, SKUS[::-1])
    tasks: list[asyncio.Task[str]] = []
    snapshot: list[dict[str, Any]] = []
    try:
        for i in (0, 1):  # j1 takes its first SKU before j2 starts
            tasks.append(asyncio.create_task(
                _attempt(conns[i], i + 1, carts[i], fix, firsts[i], gos[i])))  # fmt: skip
            await done_or_blocked(env.db, pids[i], firsts[i], what=f"j{i + 1} first")
        gos[0].set()
        if await task_or_blocked(env.db, pids[0], tasks[0], what="j1 second") is not None:
            await _waited_ms(env, pids[0], LOG_AFTER * DEADLOCK_TIMEOUT_MS)
        gos[1].set()
        if not tasks[0].done():  # buggy: both blocked once j2 asks; snapshot the cycle
            for _ in range(int(TIMEOUT_S / POLL_S)):  # bounded, as every forced wait
                if len(await lock_waiters(env.db, pids)) == 2 or tasks[1].done():
                    break
                await asyncio.sleep(POLL_S)
            snapshot = [dict(r) for r in await env.db.fetch(SNAPSHOT, pids)]
        ends = list(await asyncio.gather(*tasks))
        for i, end in enumerate(ends):
            env.outcome(end)
            if end == "40P01":  # the scheduler reruns the failed job
                rerun = await _attempt(conns[i], i + 1, carts[i], fix, asyncio.Event(), _set())
                env.outcome(f"rerun {rerun}")
    finally:
        for t in tasks:
            t.cancel()
        for conn in conns:
            await conn.close()  # a backend's stats are flushed by the time it is gone
    env.extra_evidence.update(
        pids=pids, snapshot=snapshot, monitoring=await _monitoring(env, before, t0)
    )


def _set() -> asyncio.Event:
    e = asyncio.Event()
    e.set()
    return e


async def _monitoring(env: Env, deadlocks_before: int, t0: float) -> dict[str, Any]:
    """The documents' three monitoring queries, as a periodic check would run them."""
    expected = env.outcomes.get("40P01", 0)
    deadline = time.monotonic() + STATS_SETTLE_S
    while True:  # the victim's count reaches pg_stat_database when its backend flushes
        await env.db.execute("SELECT pg_stat_clear_snapshot()")
        delta = int(await env.db.fetchval(DEADLOCKS)) - int(deadlocks_before)
        if delta >= expected or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    minutes = (time.monotonic() - t0) / 60
    oldest = await env.db.fetchrow(OLDEST_RUNNING)
    return {"deadlocks": delta, "deadlocks_per_minute": round(delta / minutes, 1),
            "duplicate_invoices": [dict(r) for r in await env.db.fetch(DUPLICATES)],
            "oldest_running_job": dict(oldest) if oldest else None}  # fmt: skip


async def buggy(env: Env) -> None:
    await _run(env, fix=False)


async def fixed(env: Env) -> None:
    await _run(env, fix=True)


# --- claims -------------------------------------------------------------------------------


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
    return Claim("DL-23", f"{variant}: the monitoring queries {what}", (variant,), check,
                 published="alert theo số 40P01/phút, và invariant query định kỳ" if finds else "")  # fmt: skip


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

SCENARIO = Scenario(
    id="deadlock-reading",
    doc=__doc__ or "",
    kind="script",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("ok", "40P01", "rerun ok"),
    claims=CLAIMS,
    published={
        "buggy": "log_lock_waits, 40P01/phút, invoice trùng theo (customer, period)",
        "fixed": "sorted SKUs + UNIQUE (customer_id, period)",
    },
    setup=setup,
    defaults=Defaults(n=2, run_timeout_s=60),
    sources=("DL", "LC"),
    script_connections=lambda n: 2,
)
