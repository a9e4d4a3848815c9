"""Lock wait modes: a conflicting lock request waits as long as the holder holds it.

Symptom:    a request hangs with no error behind a row another transaction holds, and a
            migration hangs behind an open reader, for as long as the holder stays open.
Root cause: "Mặc định, xin lock bị xung đột thì chờ vô hạn": a conflicting request waits
            until the holder commits or rolls back, for row and table locks alike.
Fix:        ask not to wait. `... FOR UPDATE NOWAIT` / `LOCK TABLE ... NOWAIT` fails at once
            (fixed-nowait); `SET LOCAL lock_timeout` bounds the wait of any statement, DDL
            included (fixed-lock-timeout). Both fail with SQLSTATE 55P03.
Published:  NOWAIT: báo lỗi ngay ERROR: could not obtain lock on row in relation "inventory"
            (SQLSTATE 55P03). SET lock_timeout = '2s': chờ tối đa 2 giây rồi lỗi canceling
            statement due to lock timeout (55P03). Áp dụng cho mọi loại lock, kể cả table lock
            của DDL. (PostgreSQL 17.11) — locking-concurrency-control.vi.txt, "NOWAIT, SKIP
            LOCKED và lock_timeout"
See:        claim LC-12. For each lock in `locks`, side by side on two tables (row: the
            holder did SELECT ... FOR UPDATE on product 101 of inventory, the waiter asks the
            same; table: the holder read orders in an open transaction, the waiter asks
            ACCESS EXCLUSIVE on orders, the lock ALTER TABLE takes) the holder keeps its lock
            `hold_ms` after the server shows the waiter blocked, then commits. Defaults
            lock_timeout_ms=200, hold_ms=400 keep the run short; -p lock_timeout_ms=2000
            -p hold_ms=2500 is the published setting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import asyncpg

from lab.claims import Claim, Record
from lab.errors import LabError, ScenarioFailure
from lab.interleave import task_or_blocked
from lab.scenario import Defaults, Env, Scenario

PRODUCT = 101
# lock -> (the holder's statement, the waiter's statement, the NOWAIT error's text)
LOCKS = {
    "row": (
        f"SELECT stock FROM inventory WHERE product_id = {PRODUCT} FOR UPDATE",
        f"SELECT stock FROM inventory WHERE product_id = {PRODUCT} FOR UPDATE",
        'could not obtain lock on row in relation "inventory"',
    ),
    "table": (
        "SELECT count(*) FROM orders",
        "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE",
        'could not obtain lock on relation "orders"',
    ),
}
TIMEOUT_TEXT = "canceling statement due to lock timeout"
NOWAIT_SHARE = 4  # "at once": NOWAIT answers more than 4× sooner than lock_timeout fires
TIMER_SLACK_MS = 200.0  # a lock_timeout error arrives within this after the timeout


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE inventory (product_id int PRIMARY KEY, stock int NOT NULL)")
    await env.db.execute("INSERT INTO inventory VALUES ($1, 1)", PRODUCT)
    await env.db.execute("CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL)")


async def buggy(env: Env) -> None:
    await _run(env, "wait")


async def fixed_nowait(env: Env) -> None:
    await _run(env, "nowait")


async def fixed_lock_timeout(env: Env) -> None:
    await _run(env, "lock_timeout")


def validate(n: int, p: Mapping[str, Any]) -> None:
    _locks(p)


def _locks(params: Mapping[str, Any]) -> list[str]:
    locks = [x.strip() for x in str(params["locks"]).split(",") if x.strip()]
    if not locks or set(locks) - set(LOCKS):
        raise LabError(f"-p locks={params['locks']!r}: a comma list of {', '.join(LOCKS)}")
    if params["hold_ms"] < params["lock_timeout_ms"] + TIMER_SLACK_MS:
        raise LabError(
            f"-p hold_ms={params['hold_ms']}: must be at least lock_timeout_ms + "
            f"{TIMER_SLACK_MS:.0f}, or the holder lets go before lock_timeout fires"
        )
    if params["lock_timeout_ms"] < 1:
        raise LabError(f"-p lock_timeout_ms={params['lock_timeout_ms']}: at least 1 ms")
    return locks


async def _run(env: Env, mode: str) -> None:
    try:  # the locks are on different tables: their attempts run side by side
        attempts = await asyncio.gather(*(_attempt(env, lock, mode) for lock in _locks(env.params)))
    except asyncpg.PostgresError as exc:
        raise ScenarioFailure(f"{env.scenario} / {env.variant}: {exc!r}") from exc
    env.extra_evidence["attempts"] = list(attempts)


async def _attempt(env: Env, lock: str, mode: str) -> dict[str, Any]:
    """The holder takes `lock`; the waiter asks for a conflicting one in `mode`."""
    hold_sql, wait_sql, _ = LOCKS[lock]
    sql = wait_sql + (" NOWAIT" if mode == "nowait" else "")
    holder, waiter = await env.connect(), await env.connect()
    holder_pid = holder.get_server_pid()
    task: asyncio.Task[tuple[str, str, float]] | None = None
    try:
        await holder.execute("BEGIN")
        await holder.execute(hold_sql)
        env.trace("holder", f"holds the {lock} lock", sql=hold_sql)
        await waiter.execute("BEGIN")
        if mode == "lock_timeout":
            ms = int(env.params["lock_timeout_ms"])
            await waiter.execute(f"SET LOCAL lock_timeout = '{ms}ms'")
        task = asyncio.create_task(_timed(waiter, sql))
        blockers = await task_or_blocked(env.db, waiter.get_server_pid(), task, what=sql)
        if blockers is not None:  # the holder keeps its lock hold_ms more, unless the waiter quits
            env.trace("server", "waiter blocked", lock=lock, blocked_by=blockers)
            await asyncio.wait({task}, timeout=env.params["hold_ms"] / 1000)
        await holder.execute("COMMIT")
        env.trace("holder", "commit")
        word, error, wait_ms = await task
        await waiter.execute("ROLLBACK")
    finally:
        if task is not None and not task.done():
            task.cancel()
        for conn in (holder, waiter):
            conn.terminate()
    env.outcome(word)
    env.sample(f"wait_ms.{lock}", wait_ms)
    env.trace("waiter", word, lock=lock, wait_ms=round(wait_ms, 1), error=error)
    return {
        "lock": lock,
        "mode": mode,
        "sql": sql,
        "outcome": word,
        "error": error,
        "wait_ms": round(wait_ms, 2),
        "blocked_by_holder": blockers is not None and holder_pid in blockers,
    }


async def _timed(conn: asyncpg.Connection, sql: str) -> tuple[str, str, float]:
    """(outcome, error text, ms from sending `sql` to its answer)."""
    t0 = time.perf_counter()
    try:
        await conn.execute(sql)
        return "ok", "", (time.perf_counter() - t0) * 1000
    except asyncpg.LockNotAvailableError as exc:  # 55P03, the only error a waiter expects
        return "55P03", str(exc), (time.perf_counter() - t0) * 1000


# --- claims -------------------------------------------------------------------------------


def _attempts(rec: Record) -> list[dict[str, Any]]:
    return list(rec["evidence"].get("attempts", []))


def _seen(rec: Record) -> str:
    return "; ".join(
        f"{a['lock']}: {a['outcome']} after {a['wait_ms']:.1f} ms"
        + (f" ({a['error']})" if a["error"] else "")
        for a in _attempts(rec)
    )


def _waits_for_holder(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    hold = rec["params"]["hold_ms"]
    ats = _attempts(rec)
    held = bool(ats) and all(
        a["outcome"] == "ok" and a["blocked_by_holder"] and a["wait_ms"] >= hold for a in ats
    )
    return held, f"buggy: {_seen(rec)} (holder let go {hold} ms after the server showed the wait)"


def _nowait_at_once(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed-nowait"]
    ats = _attempts(rec)
    held = bool(ats) and all(
        a["outcome"] == "55P03" and a["error"] == LOCKS[a["lock"]][2] and not a["blocked_by_holder"]
        for a in ats
    )
    return held, f"fixed-nowait: {_seen(rec)}; never seen in a lock queue"


def _timeout_at_timeout(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed-lock-timeout"]
    timeout = rec["params"]["lock_timeout_ms"]
    ats = _attempts(rec)
    held = bool(ats) and all(
        a["outcome"] == "55P03"
        and a["error"] == TIMEOUT_TEXT
        and timeout <= a["wait_ms"] < timeout + TIMER_SLACK_MS
        for a in ats
    )
    return held, f"fixed-lock-timeout: {_seen(rec)} (lock_timeout {timeout} ms)"


def _nowait_much_shorter(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    nowait = [a["wait_ms"] for a in _attempts(records["fixed-nowait"])]
    timed = [a["wait_ms"] for a in _attempts(records["fixed-lock-timeout"])]
    if not nowait or not timed:
        return None
    return max(nowait) * NOWAIT_SHARE < min(timed), (
        f"NOWAIT failed in at most {max(nowait):.1f} ms; lock_timeout in at least "
        f"{min(timed):.1f} ms"
    )


CLAIMS = (
    Claim(
        "LC-12",
        "buggy: without NOWAIT or lock_timeout the waiter waits until the holder ends, for "
        "row and table locks alike",
        ("buggy",),
        _waits_for_holder,
        published="Mặc định, xin lock bị xung đột thì chờ vô hạn.",
    ),
    Claim(
        "LC-12",
        "fixed-nowait: NOWAIT fails with 55P03 and the document's text, without queueing",
        ("fixed-nowait",),
        _nowait_at_once,
        published='báo lỗi ngay ERROR: could not obtain lock on row in relation "inventory" '
        "(SQLSTATE 55P03)",
    ),
    Claim(
        "LC-12",
        "fixed-lock-timeout: lock_timeout fails with 55P03 once the timeout has passed, never "
        "before, for row and table locks alike",
        ("fixed-lock-timeout",),
        _timeout_at_timeout,
        published="chờ tối đa 2 giây rồi lỗi canceling statement due to lock timeout (55P03). "
        "Áp dụng cho mọi loại lock, kể cả table lock của DDL.",
    ),
    Claim(
        "LC-12",
        f"NOWAIT fails more than {NOWAIT_SHARE}× sooner than lock_timeout",
        ("fixed-nowait", "fixed-lock-timeout"),
        _nowait_much_shorter,
    ),
)

SCENARIO = Scenario(
    id="lock-wait-modes",
    validate=validate,
    doc=__doc__ or "",
    kind="script",
    variants={
        "buggy": buggy,
        "fixed-nowait": fixed_nowait,
        "fixed-lock-timeout": fixed_lock_timeout,
    },
    outcomes=("ok", "55P03"),
    claims=CLAIMS,
    published={
        "buggy": "Mặc định, xin lock bị xung đột thì chờ vô hạn.",
        "fixed-nowait": "NOWAIT: báo lỗi ngay ERROR: could not obtain lock on row in relation "
        '"inventory" (SQLSTATE 55P03)',
        "fixed-lock-timeout": "SET lock_timeout = '2s': chờ tối đa 2 giây rồi lỗi canceling "
        "statement due to lock timeout (55P03)",
    },
    setup=setup,
    defaults=Defaults(n=1, run_timeout_s=60),
    params={"locks": "row,table", "lock_timeout_ms": 200, "hold_ms": 400},
    param_help={
        "locks": "which locks to try, a comma list of: row, table",
        "lock_timeout_ms": "SET LOCAL lock_timeout of fixed-lock-timeout (published: 2000)",
        "hold_ms": "how long the holder keeps its lock once the server shows the waiter blocked",
    },
    sources=("LC",),
)
