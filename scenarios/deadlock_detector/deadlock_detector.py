"""Deadlock detector: deadlock_timeout, not lock_timeout, breaks a row-lock cycle, picks a victim.

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
See:        claims DP-8, LC-35 in claims.py; expected/ has the schedules' transcripts. Two
            sessions pinned to the schedule `cross`: s1 locks its first row, s2 its first,
            s1 asks for its second (the server shows s1 blocked), then s2 asks for its
            second and the cycle closes. Times are from each session's own second statement. DP-8
            runs the pair at lock_timeout 5 s and 500 ms with deadlock_timeout 1 s. LC-35 runs
            `victim_trials` pairs where the session that waits SECOND has deadlock_timeout 200 ms
            (SET per session; the lab connects as a superuser, recorded); the two rows' order
            alternates between trials. The 5 s pair is the control: equal timeouts, the first waiter
            is the victim.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

from lab.core.scenario import Check, Env, executes
from lab.core.steps import Pinned, Session, schedule, show_sql
from lab.pinned.sequencer import Sequencer

ROWS = ("A", "B")
DEADLOCK_TIMEOUT_MS = 1000  # the documents' setting
SHORT_DT_MS = 200  # LC-35: the later waiter's own deadlock_timeout
DP8_TIMEOUTS_MS = (5000, 500)  # the document's lock_timeout, and one below deadlock_timeout
UPDATE = "UPDATE accounts SET balance = balance - 1 WHERE id = $1"
Settings = Sequence[Mapping[str, str]]  # each session's SET LOCALs, s1 first
TRACED: Settings = ({"lock_timeout": f"{DP8_TIMEOUTS_MS[0]}ms"},) * 2  # trace / explore


schema = executes("CREATE TABLE accounts (id text PRIMARY KEY, balance int NOT NULL)")


async def setup(env: Env) -> None:
    await env.db.executemany("INSERT INTO accounts VALUES ($1, 1000)", [(r,) for r in ROWS])


async def transfer(env: Env, s: Session, rows: Sequence[str]) -> str:
    """One transfer: lock rows[0] (step first), then rows[1] (step second), commit."""

    async def timed(sql: str, row: str) -> str:  # how long the second statement waited
        start = time.perf_counter()
        try:
            return str(await s.conn.execute(sql, row))
        except asyncpg.PostgresError:
            env.state["after_ms"][s.name] = round((time.perf_counter() - start) * 1000, 1)
            raise

    env.state.setdefault("after_ms", {})
    async with s.transaction():
        for name, value in env.state.get("settings", TRACED)[s.index].items():
            await s.conn.execute(f"SET LOCAL {name} = '{value}'")  # this session's timeouts
        await s.execute("first", UPDATE, rows[0])
        await s.step("second", timed, UPDATE, rows[1], shown=show_sql(UPDATE, (rows[1],)))
    return "ok"


async def invariant(env: Env) -> list[Check]:
    """Each committed transfer took one from both rows; a failed one took nothing."""
    rows = await env.db.fetch("SELECT id, balance FROM accounts ORDER BY id")
    ok, left = env.outcomes.get("ok", 0), ", ".join(f"{r['id']} {r['balance']}" for r in rows)
    moved = all(r["balance"] == 1000 - ok for r in rows)
    return [Check("each row moved once per commit", moved, f"balances {left}, commits {ok}")]


def order(env: Env) -> tuple[str, ...]:
    return ROWS[::-1] if env.state.get("swap") else ROWS  # the trials alternate the rows


async def buggy(env: Env, s: Session) -> str:
    return await transfer(env, s, order(env) if s.index == 0 else order(env)[::-1])


async def fixed(env: Env, s: Session) -> str:
    return await transfer(env, s, order(env))  # the fix: one lock order for every session


STEPS = ("first", "second", "commit")
# s1 takes its first row before s2 starts; sorted, s2 then waits at its first
CROSS = schedule("s1 first, s2 first, s1 second, s2 second, s1 commit, s2 commit")
SORTED = schedule("s1 first, s2 first, s1 second, s1 commit, s2 second, s2 commit")
PINNED = Pinned(
    code={"buggy": buggy, "fixed": fixed},
    steps={v: {"s1": STEPS, "s2": STEPS} for v in ("buggy", "fixed")},
    schedules={"buggy": {"cross": CROSS}, "fixed": {"cross": SORTED}},
)


async def pair(env: Env, settings: Settings, swap: bool = False) -> dict[str, Any]:
    """The variant's two sessions under its schedule `cross`, with `settings`; `swap`
    reverses which rows the first waiter takes."""
    env.state.update(settings=settings, swap=swap, after_ms={})
    code = PINNED.code[env.variant]
    conns = [await env.connect(), await env.connect()]
    try:
        seq = Sequencer(
            env.db,
            {n: (c, lambda s: code(env, s)) for n, c in zip(("s1", "s2"), conns, strict=True)},
            label=f"{env.scenario} / {env.variant}",
            header="schedule cross",
        )
        ends = await seq.run(PINNED.schedules[env.variant]["cross"])
    finally:
        for conn in conns:
            await conn.close()
    return {
        "settings": [dict(s) for s in settings],
        "ends": [ends["s1"], ends["s2"]],
        "pids": [c.get_server_pid() for c in conns],
        "transcript": seq.transcript.text(),
        "after_ms": [env.state["after_ms"].get(n) for n in ("s1", "s2")],
    }


async def run(env: Env) -> None:
    """The script verify runs for each variant: the pair at DP-8's two lock_timeouts, then
    `victim_trials` pairs whose later waiter has the shorter deadlock_timeout (LC-35)."""
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
