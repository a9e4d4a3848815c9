"""Deadlock detector: deadlock_timeout, not lock_timeout, breaks a row-lock cycle, and picks the victim.

Symptom:    a team sets `lock_timeout = '5s'` "to prevent permanent deadlock" and still sees
            40P01 after about a second, never 55P03; which of two deadlocked requests fails
            looks random.
Root cause: PostgreSQL has no permanent row-lock deadlock: a session that has waited
            deadlock_timeout (1 s) runs the detector, finds the cycle and aborts itself with
            40P01. lock_timeout only wins when it is shorter than deadlock_timeout (55P03
            instead). The victim is the session whose timer fired first: the first to wait,
            or one whose own deadlock_timeout is shorter.
Fix:        remove the cycle: lock in one order (fixed, both sessions lock A then B); keep
            lock_timeout for what it bounds (one wait), not as deadlock prevention.
Published:  "-- Set lock timeout to prevent permanent deadlock / SET lock_timeout = '5s'"
            — deadlock-prevention.zh.txt (PostgreSQL：锁超时); "Một transaction chờ lock quá
            deadlock_timeout (mặc định 1s) mới chạy bộ dò ... Docs nói rõ bên nào bị chọn là
            khó đoán và không nên dựa vào. Thường đó là bên chạy bộ dò"
            — locking-concurrency-control.vi.txt ("Deadlock")
See:        claims DP-8, LC-35 in claims.py. Two sessions, forced order: s1 locks its first row, s2 its
            first, s1 asks for its second (the lab waits until the server shows s1 blocked),
            then s2 asks for its second and the cycle closes. Times are from each session's
            own second statement. DP-8 runs the pair at lock_timeout 5 s and 500 ms with
            deadlock_timeout 1 s. LC-35 runs `victim_trials` pairs where the session that
            waits SECOND has deadlock_timeout 200 ms (SET per session; the lab connects as a
            superuser, recorded); the two rows' order alternates between trials. The 5 s pair
            is the control: equal timeouts, the first waiter is the victim.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import asyncpg

from lab.interleave import done_or_blocked, task_or_blocked
from lab.scenario import Env

ROWS = ("A", "B")
DEADLOCK_TIMEOUT_MS = 1000  # the documents' setting
SHORT_DT_MS = 200  # LC-35: the later waiter's own deadlock_timeout
DP8_TIMEOUTS_MS = (5000, 500)  # the document's lock_timeout, and one below deadlock_timeout
UPDATE = "UPDATE accounts SET balance = balance - 1 WHERE id = $1"


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE accounts (id text PRIMARY KEY, balance int NOT NULL)")
    await env.db.executemany("INSERT INTO accounts VALUES ($1, 1000)", [(r,) for r in ROWS])


async def session(conn: asyncpg.Connection, rows: tuple[str, str], first_done: asyncio.Event,
                  go: asyncio.Event, out: dict[str, Any]) -> None:  # fmt: skip
    """One transfer: lock rows[0], wait for the lab, lock rows[1], commit."""
    try:
        async with conn.transaction():
            await conn.execute(UPDATE, rows[0])  # step first
            first_done.set()
            await go.wait()  # the lab's turn: the other session takes its first row
            out["wait_start"] = time.perf_counter()
            await conn.execute(UPDATE, rows[1])  # step second: may close the cycle
        out["end"] = "ok"
    except asyncpg.PostgresError as exc:
        out["end"] = exc.sqlstate
        out["after_ms"] = round((time.perf_counter() - out["wait_start"]) * 1000, 1)


async def pair(env: Env, settings: tuple[Mapping[str, str], Mapping[str, str]],
               swap: bool = False) -> dict[str, Any]:  # fmt: skip
    """Two sessions in the forced order; `settings` are each one's SETs; `swap` reverses
    which rows the first waiter takes."""
    a, b = (ROWS, ROWS[::-1]) if env.variant == "buggy" else (ROWS, ROWS)  # the fix: one order
    if swap:
        a, b = (a[::-1], b[::-1])
    conns = [await env.connect(), await env.connect()]
    outs: list[dict[str, Any]] = [{}, {}]
    firsts, gos = [asyncio.Event(), asyncio.Event()], [asyncio.Event(), asyncio.Event()]
    tasks: list[asyncio.Task[None]] = []
    try:
        for conn, sets in zip(conns, settings, strict=True):
            for name, value in sets.items():
                await conn.execute(f"SET {name} = '{value}'")
        pids = [c.get_server_pid() for c in conns]
        for i in (0, 1):  # s1 takes its first row before s2 starts; sorted, s2 then blocks
            tasks.append(
                asyncio.create_task(session(conns[i], (a, b)[i], firsts[i], gos[i], outs[i]))
            )
            await done_or_blocked(env.db, pids[i], firsts[i], what=f"s{i + 1} first")
        gos[0].set()
        await task_or_blocked(env.db, pids[0], tasks[0], what="s1 second")  # buggy: blocks
        gos[1].set()  # the cycle closes here (buggy)
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        for conn in conns:
            await conn.close()
    ends = [o["end"] for o in outs]
    return {"settings": [dict(s) for s in settings], "ends": ends, "pids": pids,
            "after_ms": [o.get("after_ms") for o in outs]}  # fmt: skip


async def _run(env: Env) -> None:
    su = await env.db.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    dt = {"deadlock_timeout": f"{DEADLOCK_TIMEOUT_MS}ms"}
    dp8 = []
    for lt in DP8_TIMEOUTS_MS:  # DP-8: the same cycle at two lock_timeouts
        sets = {**dt, "lock_timeout": f"{lt}ms"}
        dp8.append({"lock_timeout_ms": lt, **await pair(env, (sets, sets))})
    victims = []
    for k in range(env.params["victim_trials"]):  # LC-35: the later waiter's timer is shorter
        short = {"deadlock_timeout": f"{SHORT_DT_MS}ms"}
        victims.append(await pair(env, (dt, short), swap=k % 2 == 1))
    for p in (*dp8, *victims):
        for end in p["ends"]:
            env.outcome(end)
    env.extra_evidence.update(superuser=su, dp8=dp8, victims=victims)


async def buggy(env: Env) -> None:
    await _run(env)  # opposite row orders


async def fixed(env: Env) -> None:
    await _run(env)  # pair() locks both sessions' rows in one order
