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
See:        claim LC-12 in claims.py; expected/ has the schedules' transcripts. s1, the
            holder, locks product 101 of inventory FOR UPDATE and reads orders in one
            transaction, works `hold_ms` (time is the subject: a slow transaction; pinned,
            it holds until its commit is granted), then commits. s2 asks the same row, then ACCESS
            EXCLUSIVE on orders (the lock ALTER TABLE takes), each in its own implicit transaction,
            in the variant's wait mode. Defaults lock_timeout_ms=200, hold_ms=400 keep the run
            short; -p lock_timeout_ms=2000 -p hold_ms=2500 is the published setting.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import asyncpg

from lab.core.scenario import Check, Env, executes
from lab.core.steps import Pinned, Session, schedule
from lab.errors import LabError

PRODUCT = 101
HOLD = f"""SELECT i.stock, (SELECT count(*) FROM orders) AS orders
FROM inventory i WHERE product_id = {PRODUCT} FOR UPDATE OF i"""
WORK = "SELECT pg_sleep($1)"  # the holder's slow work inside its transaction
ASKS = {  # s2's steps -> (its statement, the NOWAIT error's text)
    "ask-row": (
        f"SELECT stock FROM inventory WHERE product_id = {PRODUCT} FOR UPDATE",
        'could not obtain lock on row in relation "inventory"',
    ),
    "ask-table": (
        "LOCK TABLE orders IN ACCESS EXCLUSIVE MODE",
        'could not obtain lock on relation "orders"',
    ),
}
TIMEOUT_TEXT = "canceling statement due to lock timeout"
TIMER_SLACK_MS = 200.0  # the holder keeps its locks this long past lock_timeout (validate)


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["hold_ms"] < p["lock_timeout_ms"] + TIMER_SLACK_MS:
        raise LabError(
            f"-p hold_ms={p['hold_ms']}: must be at least lock_timeout_ms + "
            f"{TIMER_SLACK_MS:.0f}, or the holder lets go before lock_timeout fires"
        )


schema = executes("""CREATE TABLE inventory (product_id int PRIMARY KEY, stock int NOT NULL);
CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL)""")


async def setup(env: Env) -> None:
    await env.db.execute("INSERT INTO inventory VALUES ($1, 1)", PRODUCT)


async def _holder(env: Env, s: Session) -> str:
    async with s.transaction():
        await s.fetchrow("hold", HOLD)
        await s.execute("work", WORK, env.params["hold_ms"] / 1000)  # time is the subject
    return "ok"


async def _waiter(env: Env, s: Session, mode: str, asks: str = "") -> str:
    """Both asks, each its own implicit transaction; a 55P03 is the answer, not a crash.
    `asks`: the wait mode the statements use, when not `mode` (a code mutant's)."""
    asks = asks or mode
    word, timeout = "ok", int(env.params["lock_timeout_ms"]) if asks == "lock_timeout" else 0
    for step, (sql, _) in ASKS.items():
        # LOCAL: the one implicit transaction of the two statements; 0 (the default) waits forever
        sql = f"SET LOCAL lock_timeout = {timeout}; {sql}" + (" NOWAIT" if asks == "nowait" else "")
        try:
            await s.step(step, _timed, env, s, sql, mode, shown=sql)
        except asyncpg.LockNotAvailableError:  # 55P03, the only error a waiter expects
            word = "55P03"
    return word


async def _timed(env: Env, s: Session, sql: str, mode: str) -> str:
    """The statement's status; a 55P03's time from sending to answer goes to env.samples."""
    t0 = time.perf_counter()
    try:
        return str(await s.conn.execute(sql))
    except asyncpg.LockNotAvailableError:
        env.sample(f"55P03_ms.{mode}", (time.perf_counter() - t0) * 1000)
        raise


async def _request(env: Env, s: Session, mode: str) -> str:
    return await (_holder(env, s) if s.index % 2 == 0 else _waiter(env, s, mode))


async def buggy(env: Env, s: Session) -> str:
    return await _request(env, s, "wait")


async def fixed_nowait(env: Env, s: Session) -> str:
    return await _request(env, s, "nowait")


async def fixed_lock_timeout(env: Env, s: Session) -> str:
    return await _request(env, s, "lock_timeout")


async def nowait_dropped(env: Env, s: Session) -> str:
    """Not a variant: fixed-nowait with its NOWAIT dropped for a lock_timeout, the code
    mutant its "refuses at once" is judged against (its refusals counted as NOWAIT's)."""
    return await (
        _holder(env, s) if s.index % 2 == 0 else _waiter(env, s, "nowait", "lock_timeout")
    )


async def timeout_dropped(env: Env, s: Session) -> str:
    """Not a variant: fixed-lock-timeout with its lock_timeout dropped for NOWAIT, the code
    mutant its "fires at its timeout" is judged against (its refusals counted as the
    timeout's)."""
    return await (
        _holder(env, s) if s.index % 2 == 0 else _waiter(env, s, "lock_timeout", "nowait")
    )


async def invariant(env: Env) -> list[Check]:
    """A NOWAIT refusal came sooner than lock_timeout would fire; a lock_timeout one never
    before the timeout. Relative bounds only: how long past the timeout the answer comes
    depends on how loaded the machine is, so it is not judged."""
    timeout, nowait = env.params["lock_timeout_ms"], env.samples.get("55P03_ms.nowait", [])
    timed = env.samples.get("55P03_ms.lock_timeout", [])
    at_once, fired = all(ms < timeout for ms in nowait), all(ms >= timeout for ms in timed)
    sooner = f"{len(nowait)} refusal(s), each sooner than lock_timeout ({timeout} ms)"
    later = f"{len(timed)} timeout(s), each at or after {timeout} ms"
    return [
        Check("NOWAIT refuses at once", at_once, sooner if at_once else f"after {nowait} ms"),
        Check("lock_timeout fires at its timeout", fired, later if fired else f"after {timed} ms"),
    ]


# --- pinned: s1 holds row and table, s2 asks for each --------------------------------------
HOLDER, WAITER = ("hold", "work", "commit"), tuple(ASKS)
VARIANTS = ("buggy", "fixed-nowait", "fixed-lock-timeout")
SCHEDULES = {
    # s2 asks the row while s1 holds it; the table only after s1 has committed
    "row-held": schedule("s1 hold, s2 ask-row, s1 work, s1 commit, s2 ask-table"),
    # s2 takes the row before s1 does; then asks the table while s1 reads it
    "table-held": schedule("s2 ask-row, s1 hold, s2 ask-table, s1 work, s1 commit"),
}
PINNED = Pinned(
    code={"buggy": buggy, "fixed-nowait": fixed_nowait, "fixed-lock-timeout": fixed_lock_timeout},
    steps={v: {"s1": HOLDER, "s2": WAITER} for v in VARIANTS},
    schedules={v: SCHEDULES for v in VARIANTS},
    # pinned, s1 holds until its commit is granted: the schedule is the slow transaction,
    # and a lock_timeout's 55P03 ends s2's blocked ask before the next step, in every order
    params={"hold_ms": 0},
    ends_by_itself={"fixed-lock-timeout": frozenset(f"s2 {a}" for a in ASKS)},
)
