"""lease-gc-pause's machinery: SCHEDULE run at its times, A's process, the observer, the timeline.

The code under test and the schedule are in lease_gc_pause.py. A, B and C each run `hold`
on one invoice lock. Each step of SCHEDULE starts at its planned time and not before the
step before it has ended (the event it waits for: A stalled, B and C wrote or found the
lock busy, A done); B's step also waits until Redis reports A's lease gone, when
``b_at_ms >= ttl_ms``. A stalls for ``pause_ms`` (``pause_mode=sigstop``: its own process,
lab.workers, stopped at its pause point by SIGSTOP until the lab sends SIGCONT; ``sleep``: a
coroutine awaiting in the lab's loop). B releases ``b_work_ms`` after its write, after C is
done. ``holder-killed`` kills A at its pause point (the step "A is killed") instead of
waking it. The run ends when Redis holds no lease. The timeline shows when each worker
*believed* it held the lock and when Redis held its token (polled GET+PTTL, see
`Observer`). Every wait is bounded and a step that never comes fails the run, named.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from lab import workers
from lab.aio import within
from lab.errors import LabError, ScenarioFailure
from lab.scenario import Env
from scenarios.lease_gc_pause.lease_gc_pause import (
    INVOICE_ID,
    SCHEDULE,
    Code,
    Hook,
    Lease,
    hold,
    noop,
)

OBSERVE_MS = 2.0  # how often the observer polls GET + PTTL
DEL_SLACK_MS = 50.0  # a DEL's reply may be read after the poll that saw its effect
PAUSE_MODES = ("sigstop", "sleep")
WORKER_SCRIPT = Path(__file__).with_name("worker.py")
_proc_state = workers.proc_state  # the name redlock's and service-lock-order's code import


def variant(code: Code) -> Callable[[Env], Awaitable[None]]:
    """The variant that runs `code` through the schedule."""

    async def run(env: Env) -> None:
        await choreography(env, code)

    return run


async def choreography(env: Env, code: Code) -> None:
    """A, B and C on one invoice lock: every step at its time, after the step before it."""
    p = dict(env.params)
    key = env.key(f"lock:invoice:{INVOICE_ID}")
    fence_key = env.key(f"lock:invoice:{INVOICE_ID}:fence")
    rng = env.rng()
    tokens = {who: f"{who}-{rng.getrandbits(64):016x}" for who in "ABC"}
    a, b, c = (Worker(env, who) for who in "ABC")
    observer = Observer(env, key, {t: w for w, t in tokens.items()}, p["ttl_ms"])
    as_process = p["pause_mode"] == "sigstop" or code.killed
    conns: list[asyncpg.Connection] = []
    tasks: list[asyncio.Task[None]] = []
    proc: WorkerProcess | None = None
    schedule: list[dict[str, Any]] = []

    def start(w: Worker, pause_at: str | None, stall: Hook, work: Hook) -> None:
        lease = Lease(env.redis, conns.pop(), key, fence_key, p["ttl_ms"], tokens[w.who],
                      code.release, code.fenced, w.report)  # fmt: skip
        body = hold(lease, w.who, pause_at=pause_at, stall=stall, work=work)
        tasks.append(asyncio.create_task(w.run(body)))

    def start_a() -> None:
        if proc is not None:
            proc.go()
        else:
            start(a, code.pause_at, a.sleep_until_woken, noop)

    def wake_a() -> None:
        if proc is not None:
            proc.wake()
        else:
            a.wake()

    def kill_a() -> None:
        assert proc is not None  # holder-killed always runs A as a process
        tasks.append(asyncio.create_task(proc.kill()))

    async def b_work() -> None:  # B works b_work_ms; if C's turn has come, B releases after C
        await asyncio.sleep(p["b_work_ms"] / 1000)
        if p["c_at_ms"] <= env.now_ms():
            await _bounded(c.done, "B's release: waiting for C", p)

    async def c_work() -> None:
        await asyncio.sleep(p["c_work_ms"] / 1000)

    # SCHEDULE's steps: what each must also wait for, its action, the event that ends it
    b_guard = (
        [("A's lease to end in Redis", observer.gone("A"))] if p["b_at_ms"] >= p["ttl_ms"] else []
    )
    actions: dict[str, tuple[list[tuple[str, asyncio.Event]], Callable[[], None], asyncio.Event]]
    actions = {
        "A takes the lease and stalls": ([], start_a, a.stalled),
        "B tries": (b_guard, lambda: start(b, None, noop, b_work), b.turn),
        "C tries": ([], lambda: start(c, None, noop, c_work), c.turn),
        "A wakes": ([], wake_a, a.done),
        "A is killed": ([], kill_a, a.done),
    }
    skip = "A wakes" if code.killed else "A is killed"
    steps = [(0.0 if when == "0" else float(p[when]), name, *actions[name])
             for when, name in SCHEDULE if name != skip]  # fmt: skip
    steps.sort(key=lambda s: s[0])  # stable: ties keep the published order

    try:
        conns = [await env.connect() for _ in range(2 if as_process else 3)]
        if as_process:
            if not env.redis_url:
                raise ScenarioFailure(f"{env.scenario}: no Redis URL for the worker process")
            cfg = {"who": "A", "redis_url": env.redis_url, "dsn": env.dsn, "key": key,
                   "fence_key": fence_key, "ttl_ms": p["ttl_ms"], "token": tokens["A"],
                   "release": code.release, "fenced": code.fenced,
                   "pause_at": code.pause_at}  # fmt: skip
            proc = await WorkerProcess.start(env, a, cfg)
        env.t0 = time.perf_counter()  # the clock starts with A; every worker is connected
        tasks.append(asyncio.create_task(observer.run()))
        await _bounded(observer.first_poll, "the first observation of the lock key", p)
        for planned, name, guards, action, ends in steps:
            await asyncio.sleep(max(0.0, planned - env.now_ms()) / 1000)
            waited = [what for what, ev in guards if not ev.is_set()]
            for what, ev in guards:
                await _bounded(ev, f"{name}: waiting for {what}", p)
            schedule.append({"step": name, "planned_ms": planned, "at_ms": round(env.now_ms(), 1),
                             "waited_for": waited})  # fmt: skip
            action()
            await _bounded(ends, name, p)
            if proc is not None and proc.error:
                raise ScenarioFailure(f"{env.scenario} / {env.variant}: {proc.error}")
            if name.startswith("A takes") and "got lock" not in a.seen:
                raise ScenarioFailure(f"{env.scenario}: A found the lock busy at the start")
        for w in (a, b, c):
            await _bounded(w.done, f"{w.who} to finish", p)
        observer.free.clear()  # the run ends when Redis holds no lease (e.g. a dead A's)
        await _bounded(observer.free, "the lock to be free in Redis", p)
        for t in tasks:
            if t.done() and t.exception() is not None:
                raise ScenarioFailure(
                    f"{env.scenario} / {env.variant}: a worker raised {t.exception()!r}"
                )
        if proc is not None and proc.error:
            raise ScenarioFailure(f"{env.scenario} / {env.variant}: {proc.error}")
    finally:
        observer.running = False
        for t in tasks:
            t.cancel()
        if tasks:  # bounded: a task that swallowed its cancel must not hang the run
            await asyncio.wait(tasks, timeout=5)
        for t in tasks:
            if t.done() and not t.cancelled():
                t.exception()  # retrieved: a worker's failure was reported above
        if proc is not None:
            await proc.close()
        for conn in conns:
            conn.terminate()
    for w in (a, b, c):
        if w.outcome is not None:
            env.outcome(w.outcome)
    row = await env.db.fetchrow("SELECT id, body, fence FROM invoices WHERE id = $1", INVOICE_ID)
    env.extra_evidence["final_row"] = dict(row) if row else None
    env.extra_evidence["schedule"] = schedule
    env.extra_evidence["observer"] = observer.stats()
    env.extra_evidence["timeline"] = timeline(env.events, observer.spans)


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["pause_mode"] not in PAUSE_MODES:
        raise LabError(f"pause_mode={p['pause_mode']!r}: choose from {', '.join(PAUSE_MODES)}")
    for k in ("ttl_ms", "pause_ms", "b_at_ms", "c_at_ms", "b_work_ms", "c_work_ms"):
        if p[k] < 0 or (k == "ttl_ms" and p[k] < 1):
            raise LabError(f"{k}={p[k]}: must be {'at least 1' if k == 'ttl_ms' else '>= 0'}")


async def _bounded(event: asyncio.Event, what: str, p: Mapping[str, Any]) -> None:
    """Every wait of the choreography ends: a step that never comes fails the run, named."""
    limit = (p["ttl_ms"] + p["pause_ms"] + p["b_work_ms"] + p["c_work_ms"]) / 1000 + 10
    try:
        await within(event.wait(), limit)
    except TimeoutError:
        raise ScenarioFailure(f"lease-gc-pause: stuck at {what} after {limit:.0f} s") from None


class Worker:
    """A, B or C as the choreography sees it: its trace lines become events to wait for."""

    def __init__(self, env: Env, who: str) -> None:
        self.env, self.who = env, who
        self.stalled, self.turn, self.done = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._wake = asyncio.Event()
        self.seen: set[str] = set()
        self.outcome: str | None = None

    def report(self, event: str, *, at_ms: float | None = None, **fields: Any) -> None:
        self.env.trace(self.who, event, at_ms=at_ms, **fields)
        self.seen.add(event)
        if event == "stall":
            self.stalled.set()
        if event in ("write", "lock busy"):
            self.turn.set()

    async def run(self, body: Awaitable[str]) -> None:
        try:
            self.outcome = await body
        finally:
            self.end()

    def end(self, outcome: str | None = None) -> None:
        """The worker is over (each step waiting on it goes on); `outcome` if not yet known."""
        self.outcome = self.outcome or outcome
        for ev in (self.stalled, self.turn, self.done):
            ev.set()

    async def sleep_until_woken(self) -> None:
        """pause_mode=sleep: the stall is an await the lab's event loop runs around."""
        t = self.env.now_ms()
        self.report("stall", how="await in the lab's event loop")
        await self._wake.wait()
        self.report("resume", frozen_ms=round(self.env.now_ms() - t, 1))

    def wake(self) -> None:
        self._wake.set()


class WorkerProcess:
    """A holder in a process of its own (worker.py, on lab.workers); its events become
    `worker`'s trace. Its pause point is a fault step: when it gets there the lab stops it
    (SIGSTOP, and waits for the kernel's 'T'); ``wake`` grants it on and sends SIGCONT."""

    def __init__(self, env: Env, worker: Worker) -> None:
        self.env, self.worker = env, worker
        self.w: workers.Worker | None = None
        self.error = ""
        self._stop: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, env: Env, worker: Worker, cfg: dict[str, Any]) -> WorkerProcess:
        """Spawn it with `cfg`; returns once it is connected and waits for ``go``."""
        self = cls(env, worker)
        self.w = await workers.Worker.spawn(
            WORKER_SCRIPT, cfg, name=f"lease worker {worker.who}", on_event=self._on_event
        )
        try:
            await self.w.wait_for("step")  # at "go": connected to both servers
        except BaseException:
            await self.close()
            raise
        return self

    @property
    def proc(self) -> asyncio.subprocess.Process:
        assert self.w is not None
        return self.w.proc

    def _on_event(self, ev: workers.Event) -> None:
        w, at = self.worker, ev.at_ms(self.env.t0)
        if ev.name in ("ready", "step"):
            if ev.fields.get("step") == "wake":  # at its pause point: the fault step "pause"
                self._stop = asyncio.create_task(self._pause(at))
        elif ev.name == "returned":
            w.end(ev.fields["result"])
        elif ev.name in ("error", "garbled"):
            self.error = f"{self._name()}: {ev.fields.get('error') or ev.fields.get('line')}"
            w.end()
        elif ev.name == "exit":
            if self.w is not None and not self.w.killed and w.outcome is None:
                self.error = self.error or f"{self._name()} died: {self.w.status()}"
                w.end()
        else:
            w.report(ev.name, at_ms=at, **ev.fields)

    def _name(self) -> str:
        return f"lease worker {self.worker.who}"

    async def _pause(self, at_ms: float) -> None:
        assert self.w is not None
        try:
            state = await self.w.pause()
        except workers.WorkerError as exc:
            self.error = str(exc)
            self.worker.end()
            return
        self.worker.report("stall", at_ms=at_ms, how="SIGSTOP", pid=self.w.pid, process_state=state)

    def go(self) -> None:
        assert self.w is not None
        self.w.grant("go")

    def wake(self) -> None:
        """The fault step "resume": grant ``wake`` (read once it runs), then SIGCONT."""
        assert self.w is not None
        self.w.grant("wake")
        self.w.resume()

    async def kill(self) -> None:
        """The fault step "kill": A crashes while frozen; no finally, no release."""
        assert self.w is not None
        await self.w.kill()
        self.worker.report("killed", signal="SIGKILL")
        self.worker.end("killed")

    async def close(self) -> None:
        if self._stop is not None:
            self._stop.cancel()
            await asyncio.gather(self._stop, return_exceptions=True)
        if self.w is not None:
            await self.w.close()


@dataclass
class Observer:
    """Whose token Redis holds as the lock value, polled with GET + PTTL in one MULTI.

    A poll ran in Redis somewhere between its send and its reply, so each sighting of a
    token bounds its PX deadline to [send + PTTL, reply + PTTL]; the span's deadline is the
    middle of the intersection over all its sightings (fast polls make it tight). A "redis"
    span starts at deadline - TTL (when the SET ran) and ends at the deadline when the token
    expired, or at the first poll that no longer saw it when it was deleted (the timeline
    then uses the reply of the DEL that removed it, when there is one).
    """

    env: Env
    key: str
    owners: Mapping[str, str]  # token -> who
    ttl_ms: int
    spans: list[dict[str, Any]] = field(default_factory=list)
    first_poll: asyncio.Event = field(default_factory=asyncio.Event)
    free: asyncio.Event = field(default_factory=asyncio.Event)  # the last poll saw no lock
    running: bool = True
    _gone: dict[str, asyncio.Event] = field(default_factory=dict)
    _cur: dict[str, Any] | None = None
    _prev_sent: float = 0.0
    _polls: int = 0
    _max_gap: float = 0.0

    def gone(self, who: str) -> asyncio.Event:
        """Set once `who`'s token is no longer the lock value (expired or deleted)."""
        return self._gone.setdefault(who, asyncio.Event())

    async def run(self) -> None:
        # A flag, not only cancel(): a cancel landing inside redis-py can be swallowed.
        while self.running:
            sent = self.env.now_ms()
            async with self.env.redis.pipeline(transaction=True) as pipe:
                pipe.get(self.key)
                pipe.pttl(self.key)
                value, pttl = await pipe.execute()
            reply = self.env.now_ms()
            who = self.owners.get(value.decode(), "?") if value is not None else None
            self._see(who, int(pttl), sent, reply)
            self.first_poll.set()
            if who is None:
                self.free.set()
            else:
                self.free.clear()
            await asyncio.sleep(OBSERVE_MS / 1000)

    def _see(self, who: str | None, pttl: int, sent: float, reply: float) -> None:
        if self._polls:
            self._max_gap = max(self._max_gap, sent - self._prev_sent)
        self._polls += 1
        cur = self._cur
        if cur is not None and cur["who"] == who:
            cur["last_sent"] = sent
            if pttl >= 0:
                cur["lo"], cur["hi"] = max(cur["lo"], sent + pttl), min(cur["hi"], reply + pttl)
        else:
            if cur is not None:
                deadline = _middle(cur["lo"], cur["hi"])
                expired = deadline <= reply  # gone by its PX, not by a DEL
                end = deadline if expired else (sent + reply) / 2
                how = "expired" if expired else "deleted"
                known = math.isfinite(deadline)  # the key had a TTL
                start = max(cur["after"], deadline - self.ttl_ms) if known else cur["start_ms"]
                span = {"who": cur["who"], "start_ms": start, "end_ms": end,
                        "last_sent": cur["last_sent"], "gone_reply": reply, "how": how}  # fmt: skip
                self.spans.append(span)
                self.env.trace("redis", f"lease of {cur['who']} {span['how']}", at_ms=end)
                self.gone(cur["who"]).set()
            self._cur = None
            if who is not None:
                lo, hi = (sent + pttl, reply + pttl) if pttl >= 0 else (math.inf, -math.inf)
                start = max(self._prev_sent, _middle(lo, hi) - self.ttl_ms) if pttl >= 0 else sent
                self._cur = {"who": who, "start_ms": start, "after": self._prev_sent,
                             "last_sent": sent, "lo": lo, "hi": hi}  # fmt: skip
                self.env.trace("redis", f"lock value is {who}'s token", at_ms=start, pttl=pttl)
        self._prev_sent = sent

    def stats(self) -> dict[str, Any]:
        return {"what": "GET + PTTL in one MULTI", "every_ms": OBSERVE_MS, "polls": self._polls,
                "max_gap_ms": round(self._max_gap, 1)}  # fmt: skip


def _middle(lo: float, hi: float) -> float:
    return lo if hi < lo else (lo + hi) / 2


def timeline(trace: list[dict[str, Any]], redis_spans: list[dict[str, Any]]) -> dict[str, Any]:
    """Belief spans (got lock -> release or death), Redis spans, and every worker step as a mark."""
    spans: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    held: dict[str, dict[str, Any]] = {}
    deletes: list[dict[str, Any]] = []
    for e in trace:
        who, ev, t = e["who"], e["event"], e["t_ms"]
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
        end, how, label = s["end_ms"], s["how"], "until PX expiry"
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
    return {
        "who": who,
        "kind": kind,
        "start_ms": round(start, 1),
        "end_ms": round(end, 1),
        "label": label,
    }
