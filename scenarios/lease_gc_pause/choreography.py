"""lease-gc-pause's timed story (`locklab run`): SCHEDULE at its times, the key watcher,
the timeline.

The code under test is in lease_gc_pause.py. A, B and C each run `hold` on one invoice
lock. Each step of SCHEDULE starts at its planned time and not before the step before it
has ended (the event it waits for: A stalled, B and C wrote or found the lock busy, A
done); B's step also waits until Redis reports A's lease gone, when ``b_at_ms >= ttl_ms``
(lab.pinned.timed.run_steps). A stalls for ``pause_ms`` (``pause_mode=sigstop``: its own process,
worker.py on lab.procs.workers, stopped at its pause point by SIGSTOP until the lab sends
SIGCONT; ``sleep``: a coroutine awaiting in the lab's loop). B releases ``b_work_ms``
after its write, after C is done. ``holder-killed`` kills A at its pause point (the step
"A is killed") instead of waking it. The run ends when Redis holds no lease. The timeline
shows when each worker *believed* it held the lock and when Redis held its token (the
observer ``WATCH``: lab.pinned.timed.KeyWatch, polled GET + PTTL + TIME). Pinned to an
order instead of times, the same steps are schedules.py's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import asyncpg

from lab.core.scenario import Env, Observer
from lab.errors import ScenarioFailure
from lab.kit.redislock import COMPARE_AND_DELETE
from lab.pinned.timed import (
    Actor,
    KeyWatch,
    ProcessActor,
    Step,
    bounded,
    end_all,
    raised,
    run_steps,
)
from scenarios.lease_gc_pause.lease_gc_pause import INVOICE_ID, KEY, Code, Hook, Lease, hold, noop
from scenarios.lease_gc_pause.schedules import token

# The timed story, (when, step): each step at its time, after the one before it ended.
# A's pause is a fault: A stops at its pause point (SIGSTOP) until "A wakes" (SIGCONT), or
# is killed. Pinned, schedules.py orders the same steps.
SCHEDULE = (
    ("0", "A takes the lease and stalls"),
    ("0", "A is killed"),  # only in holder-killed: SIGKILL while stopped, no finally runs
    ("b_at_ms", "B tries"),  # not before Redis reports A's lease gone, when b_at_ms >= ttl_ms
    ("c_at_ms", "C tries"),
    ("pause_ms", "A wakes"),  # not in holder-killed
)
DEL_SLACK_MS = 50.0  # a DEL's reply may be read after the poll that saw its effect
PAUSE_MODES = ("sigstop", "sleep")
WORKER_SCRIPT = Path(__file__).with_name("worker.py")


class WorkerProcess(ProcessActor):
    """A holder in the lease worker's process (worker.py)."""

    @classmethod
    async def start(cls, env: Env, worker: Actor, cfg: dict[str, Any]) -> ProcessActor:
        return await cls.spawn(env, worker, WORKER_SCRIPT, cfg)


async def _watch(env: Env) -> None:
    """The observer's start: the run's tokens, and a KeyWatch on the lock key."""
    env.state["tokens"] = tokens = {who: token(env, who) for who in "ABC"}
    owners = {t: w for w, t in tokens.items()}
    env.state["watch"] = watch = KeyWatch(env, env.key(KEY), owners, env.params["ttl_ms"])
    watch.start()


async def _unwatch(env: Env) -> None:
    """The observer's stop: what it saw, and the timeline drawn from it and the trace."""
    watch: KeyWatch = env.state["watch"]
    await watch.stop()
    env.extra_evidence["observer"] = watch.stats()
    env.extra_evidence["timeline"] = timeline(env.events, watch.spans)


WATCH = Observer("lock key (GET + PTTL + TIME)", _watch, _unwatch)


def variant(code: Code) -> Callable[[Env], Awaitable[None]]:
    """The variant that runs `code` through the schedule."""

    async def run(env: Env) -> None:
        await choreography(env, code)

    return run


def _limit(p: Mapping[str, Any]) -> float:
    """Every wait of the story ends: a step that never comes fails the run, named."""
    return float(p["ttl_ms"] + p["pause_ms"] + p["b_work_ms"] + p["c_work_ms"]) / 1000 + 10


async def choreography(env: Env, code: Code) -> None:
    """A, B and C on one invoice lock: every step at its time, after the step before it."""
    p = dict(env.params)
    label = f"{env.scenario} / {env.variant}"
    limit = _limit(env.params)
    key = env.key(KEY)
    tokens = env.state["tokens"]
    watch = env.state["watch"]
    a, b, c = (Actor(env, who) for who in "ABC")
    as_process = p["pause_mode"] == "sigstop" or code.killed
    conns: list[asyncpg.Connection] = []
    tasks: list[asyncio.Task[None]] = []
    procs: list[ProcessActor] = []

    def start(w: Actor, pause_at: str | None, stall: Hook, work: Hook) -> None:
        conn = conns.pop()
        fkey = f"{key}:fence"
        token = tokens[w.who]
        lease = Lease(
            env.redis, conn, key, fkey, p["ttl_ms"], token, code.release, code.fenced, w.report
        )
        body = hold(lease, w.who, pause_at=pause_at, stall=stall, work=work)
        tasks.append(asyncio.create_task(w.run(body)))

    def start_a() -> None:
        if procs:
            procs[0].go()
        else:
            start(a, code.pause_at, a.sleep_until_woken, noop)

    def wake_a() -> None:
        if procs:
            procs[0].wake()
        else:
            a.wake()

    async def kill_and_reap() -> None:  # the mutant's supervisor frees the dead A's lock
        await procs[0].kill()
        if code.reaped:
            freed = await env.redis.eval(COMPARE_AND_DELETE, 1, key, tokens["A"])
            env.trace("supervisor", "reaped A's lock", result=int(freed))

    def kill_a() -> None:  # holder-killed always runs A as a process
        tasks.append(asyncio.create_task(kill_and_reap()))

    async def b_work() -> None:  # B works b_work_ms; if C's turn has come, B releases after C
        await asyncio.sleep(p["b_work_ms"] / 1000)
        if p["c_at_ms"] <= env.now_ms():
            await bounded(c.done, "B's release: waiting for C", limit, label)

    async def c_work() -> None:
        await asyncio.sleep(p["c_work_ms"] / 1000)

    b_guard = (
        [("A's lease to end in Redis", watch.gone("A"))] if p["b_at_ms"] >= p["ttl_ms"] else []
    )
    if not code.pause_at:  # the mutant: A's lease may come and go between two polls
        b_guard = [("A to finish", a.done)]
    actions: dict[str, tuple[Callable[[], None], asyncio.Event, list[tuple[str, asyncio.Event]]]]
    actions = {
        "A takes the lease and stalls": (start_a, a.stalled, []),
        "B tries": (lambda: start(b, None, noop, b_work), b.turn, b_guard),
        "C tries": (lambda: start(c, None, noop, c_work), c.turn, []),
        "A wakes": (wake_a, a.done, []),
        "A is killed": (kill_a, a.done, []),
    }
    skip = {"A wakes" if code.killed else "A is killed"}
    if not code.pause_at:  # the mutant: A never stalls, so nothing wakes it
        skip.add("A wakes")
    steps = [
        Step(0.0 if when == "0" else float(p[when]), name, *actions[name])
        for when, name in SCHEDULE
        if name not in skip
    ]

    def check(name: str) -> None:
        if procs and procs[0].error:
            raise ScenarioFailure(f"{label}: {procs[0].error}")
        if name.startswith("A takes") and "got lock" not in a.seen:
            raise ScenarioFailure(f"{env.scenario}: A found the lock busy at the start")

    try:
        conns = [await env.connect() for _ in range(2 if as_process else 3)]
        if as_process:
            if not env.redis_url:
                raise ScenarioFailure(f"{env.scenario}: no Redis URL for the worker process")
            cfg: dict[str, Any] = dict(who="A", redis_url=env.redis_url, dsn=env.dsn, key=key)
            cfg |= {"fence_key": f"{key}:fence", "ttl_ms": p["ttl_ms"], "token": tokens["A"]}
            cfg |= {"release": code.release, "fenced": code.fenced, "pause_at": code.pause_at}
            procs.append(await WorkerProcess.start(env, a, cfg))
        env.t0 = time.perf_counter()  # the clock starts with A; every worker is connected
        watch.restart_clock()
        await bounded(watch.first_poll, "the first observation of the lock key", limit, label)
        schedule = await run_steps(env, steps, limit, check)
        for w in (a, b, c):
            await bounded(w.done, f"{w.who} to finish", limit, label)
        watch.free.clear()  # the run ends when Redis holds no lease (e.g. a dead A's)
        await bounded(watch.free, "the lock to be free in Redis", limit, label)
        if (exc := raised(tasks)) is not None:
            raise ScenarioFailure(f"{label}: a worker raised {exc!r}")
        check("the end")
    finally:
        await end_all(tasks, procs, conns)
    for w in (a, b, c):
        if w.outcome is not None:
            env.outcome(w.outcome)
    row = await env.db.fetchrow("SELECT id, body, fence FROM invoices WHERE id = $1", INVOICE_ID)
    env.extra_evidence["final_row"] = dict(row) if row else None
    env.extra_evidence["schedule"] = schedule


def timeline(trace: list[dict[str, Any]], redis_spans: list[dict[str, Any]]) -> dict[str, Any]:
    """Belief spans (got lock -> release or death), Redis spans, and every worker step as a mark."""
    spans: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    held: dict[str, dict[str, Any]] = {}
    deletes: list[dict[str, Any]] = []
    for e in trace:
        who = e["who"]
        ev = e["event"]
        t = e["t_ms"]
        if who == "redis":
            continue
        if ev == "got lock":
            held[who] = e
            label = f"SET NX -> OK, fence={e['fence']}"
        elif ev in ("release", "killed") and who in held:
            got = held.pop(who)
            spans.append(_bar(who, "belief", got["t_ms"], t, f"fence={got['fence']}"))
            label = f"{ev} -> {e['result']} ({e['how']})" if ev == "release" else "killed (SIGKILL)"
            if ev == "release" and e["result"]:
                deletes.append(e)
        elif ev == "write":
            label = f"write fence={e['fence']} -> {e['rows']} row{'s' if e['rows'] != 1 else ''}"
        elif ev == "stall":
            label = f"stall ({e['how'].split()[0]})"
        elif ev == "resume":
            label = f"resume (frozen {e['frozen_ms']:.0f} ms)"
        elif ev == "GET":
            label = f"GET -> {'mine' if e['mine'] else 'not mine'}"
        else:
            label = ev
        marks.append({"who": who, "t_ms": t, "label": label})
    for who, got in held.items():  # never released (the run was cut short)
        spans.append(_bar(who, "belief", got["t_ms"], trace[-1]["t_ms"], f"fence={got['fence']}"))
    for s in redis_spans:  # "ended" says how, for the claims; the label is for reading
        end = s["end_ms"]
        how = s["how"]
        label = "until PX expiry"
        if how == "deleted":  # the DEL that ran between the last poll that saw it and the next
            label = "until deleted"
            lo, hi = s["last_sent"], s["gone_reply"] + DEL_SLACK_MS
            hit = [d for d in deletes if lo <= d["t_ms"] <= hi]
            if hit:
                end, how = min(end, hit[0]["t_ms"]), f"deleted by {hit[0]['who']}"
                label = f"until {hit[0]['who']}'s DEL"
        spans.append({**_bar(s["who"], "redis", s["start_ms"], end, label), "ended": how})
    return {"unit": "ms", "spans": spans, "marks": marks}


def _bar(who: str, kind: str, start: float, end: float, label: str) -> dict[str, Any]:
    return dict(who=who, kind=kind, start_ms=round(start, 1), end_ms=round(end, 1), label=label)
