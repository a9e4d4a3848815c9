"""Lease + GC pause: a Redis lock expires under a frozen holder; DEL and fencing decide the damage.

Symptom:    two workers send the same invoice: the lock "held", yet A and B (and then B
            and C) both believed they owned it, and A's stale write overwrote B's.
Root cause: a lease expires while its holder is frozen (GC pause, VM suspend) and the
            holder cannot know. Released with a plain DEL, the woken holder deletes the
            *next* holder's lock and lets a third in; written without a fence, its stale
            write lands. GET-then-DEL from the client only narrows the window: the lock
            can expire and be taken between the two commands.
Fix:        a random token per holder and a Lua compare-and-delete in `finally` (fixed):
            keeps B's lock, C sees it busy. Every lease still has the A/B overlap, so the
            storage must refuse stale writers: INCR a fence with each lease and write
            `UPDATE invoices SET body=$2, fence=$1 WHERE id=42 AND fence < $1`.
Published:  TTL 300 ms, A pauses 500 ms, B at 350 ms, C at 550 ms. Plain DEL: A release
            -> 1 (deletes B's lock), C got lock fence=3 while B holds. Compare-and-delete:
            C lock busy, A release -> 0, B release -> 0. Fencing: B (fence=2) writes -> 1,
            A (fence=1) writes -> 0, row {id: 42, body: 'from B', fence: 2} (Redis 7.4.11,
            Node 24) — deadlock-distributed-lock-cron.vi.txt, "Redis lock: DEL trơn ...".
See:        claims DL-10..DL-13. Choreography: A takes the lease at 0 ms and stalls for
            `pause_ms` (pause_mode=sigstop: its own process, frozen by SIGSTOP until the lab
            sends SIGCONT; sleep: a coroutine awaiting in the lab's loop). B tries at
            `b_at_ms` but not before Redis reports A's lease gone; A wakes at `pause_ms` but
            not before B's turn is over; C tries at `c_at_ms` after A's release; B releases
            `b_work_ms` after its write, after C is done. Every variant runs these steps;
            they differ in the release and the write, and buggy-get-then-del stalls A
            between its GET and DEL (the race it has), holder-killed kills A instead
            of resuming it. The run ends when Redis holds no lease. The timeline shows
            when each worker *believed* it held the lock and when Redis held its token
            (polled GET+PTTL, see `Observer`). Cases for DL-13: ttl-1000 (TTL 1000 ms,
            pause 1200 ms: the same overlap) and ttl-above-pause (TTL 600 ms: this pause
            no longer overlaps, and a dead holder still blocks for the whole TTL).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import asyncpg

from lab.aio import within
from lab.claims import Check as ClaimCheck
from lab.claims import Claim, Record, invariant_broken, invariants_hold
from lab.errors import LabError, ScenarioFailure
from lab.scenario import Check, Defaults, Env, Scenario
from scenarios import _lease_worker
from scenarios._lease_worker import INVOICE_ID, Hook, Lease, hold, noop

TTL_MS = 300  # SET lock:invoice:42 <token> NX PX 300
PAUSE_MS = 500  # A's stall
B_AT_MS = 350
C_AT_MS = 550
B_WORK_MS = 400  # B outlives its own lease too: its release finds the key gone (-> 0)
C_WORK_MS = 100  # C releases before B, as in the published trace
OBSERVE_MS = 2.0  # how often the observer polls GET + PTTL
DEL_SLACK_MS = 50.0  # a DEL's reply may be read after the poll that saw its effect
PAUSE_MODES = ("sigstop", "sleep")
FENCE_INVARIANT = "fence never goes backwards"
# Run as a script, not `-m scenarios...`: the worker imports no scenario (nor the catalogue).
WORKER_SCRIPT = str(Path(_lease_worker.__file__).resolve())


@dataclass(frozen=True)
class Code:
    """What a variant runs: the release, whether the write is fenced, where A stalls."""

    release: str  # "del" | "cad" | "get-del"
    fenced: bool
    pause_at: str = "work"  # "work": before the write; "release": inside the release
    killed: bool = False  # A never wakes: SIGKILL at its pause point


async def buggy(env: Env) -> None:
    await choreography(env, Code(release="del", fenced=False))


async def fixed(env: Env) -> None:
    await choreography(env, Code(release="cad", fenced=True))


async def buggy_get_then_del(env: Env) -> None:
    await choreography(env, Code(release="get-del", fenced=True, pause_at="release"))


async def holder_killed(env: Env) -> None:
    await choreography(env, Code(release="cad", fenced=True, killed=True))


async def setup(env: Env) -> None:
    await env.db.execute(
        f"""
        CREATE TABLE invoices (id int PRIMARY KEY, body text NOT NULL, fence bigint NOT NULL);
        INSERT INTO invoices VALUES ({INVOICE_ID}, 'draft', 0);
        -- observation only: every write that landed, with the fence it replaced
        CREATE TABLE invoice_writes (seq bigserial PRIMARY KEY, old_fence bigint,
                                     new_fence bigint, body text);
        CREATE FUNCTION log_invoice_write() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO invoice_writes (old_fence, new_fence, body)
          VALUES (OLD.fence, NEW.fence, NEW.body);
          RETURN NEW;
        END $$;
        CREATE TRIGGER invoice_writes AFTER UPDATE ON invoices
          FOR EACH ROW EXECUTE FUNCTION log_invoice_write();
        """
    )


async def invariant(env: Env) -> list[Check]:
    """The invoice's fence never went backwards: no holder with an older lease wrote last."""
    writes = await env.db.fetch(
        "SELECT old_fence, new_fence, body FROM invoice_writes ORDER BY seq"
    )
    back = [f"{w['body']} wrote fence {w['new_fence']} over {w['old_fence']}" for w in writes
            if w["new_fence"] <= w["old_fence"]]  # fmt: skip
    done = ", ".join(f"{w['old_fence']}->{w['new_fence']}" for w in writes) or "no writes"
    return [Check(FENCE_INVARIANT, not back, "; ".join(back) or done)]


# --- the choreography ------------------------------------------------------------------------


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

    async def b_work() -> None:  # B works b_work_ms; if C's turn has come, B releases after C
        await asyncio.sleep(p["b_work_ms"] / 1000)
        if p["c_at_ms"] <= env.now_ms():
            await _bounded(c.done, "B's release: waiting for C", p)

    async def c_work() -> None:
        await asyncio.sleep(p["c_work_ms"] / 1000)

    # (planned ms, name, what it must also wait for, action, the event that ends the step)
    b_guard = (
        [("A's lease to end in Redis", observer.gone("A"))] if p["b_at_ms"] >= p["ttl_ms"] else []
    )
    steps: list[
        tuple[float, str, list[tuple[str, asyncio.Event]], Callable[[], None], asyncio.Event]
    ]
    steps = [
        (0, "A takes the lease and stalls", [], start_a, a.stalled),
        (p["b_at_ms"], "B tries", b_guard, lambda: start(b, None, noop, b_work), b.turn),
        (p["c_at_ms"], "C tries", [], lambda: start(c, None, noop, c_work), c.turn),
    ]
    if not code.killed:
        steps.append((p["pause_ms"], "A wakes", [], wake_a, a.done))
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
            if name.startswith("A takes") and code.killed and proc is not None:
                await proc.kill()
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


# --- workers, the worker process, the observer ---------------------------------------------------


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
    """A in a process of its own, so a stop freezes it whole; killed by PID in `close`."""

    def __init__(self, env: Env, worker: Worker, proc: asyncio.subprocess.Process) -> None:
        self.env, self.worker, self.proc = env, worker, proc
        self.reader: asyncio.Task[None] | None = None
        self.stderr = b""
        self.error = ""
        self.killing = False

    @classmethod
    async def start(cls, env: Env, worker: Worker, cfg: dict[str, Any]) -> WorkerProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, WORKER_SCRIPT, str(os.getpid()), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        self = cls(env, worker, proc)
        try:
            assert proc.stdin is not None
            proc.stdin.write((json.dumps(cfg) + "\n").encode())  # secrets via the pipe, not argv
            await proc.stdin.drain()
            line = await within(self._line(), 30)
            if line.get("event") != "ready":
                raise ScenarioFailure(f"lease worker did not start: {line} {await self._err()}")
        except BaseException:
            await self.close()
            raise
        return self

    async def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        raw = await self.proc.stdout.readline()
        return json.loads(raw) if raw else {"event": "eof"}

    async def _err(self) -> str:
        assert self.proc.stderr is not None
        with contextlib.suppress(Exception):
            self.stderr += await within(self.proc.stderr.read(), 2)
        return self.stderr.decode(errors="replace")[-800:]

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            await self._dispatch()
        except Exception as exc:  # reported by the choreography after its next step
            self.error = f"lease worker A: {exc}"
            self.worker.end()

    async def _dispatch(self) -> None:
        w = self.worker
        while True:
            line = await self._line()
            event = line.pop("event")
            at = (line.pop("t") - self.env.t0) * 1000 if "t" in line else None
            if event == "eof":
                if not self.killing and w.outcome is None:
                    self.error = f"lease worker A died: {await self._err()}"
                    w.end()
                return
            if event == "done":
                w.end(line["outcome"])
            elif event == "stall":
                state = await self._stopped_state()
                w.report("stall", at_ms=at, how="SIGSTOP", pid=line.get("pid"), process_state=state)
            else:
                w.report(event, at_ms=at, **line)

    async def _stopped_state(self) -> str:
        """Wait until the kernel reports the process stopped ('T'); '?' without /proc."""
        for _ in range(2000):
            state = _proc_state(self.proc.pid)
            if state in ("T", "t", "?"):
                return state
            await asyncio.sleep(0.0005)
        raise ScenarioFailure("lease worker A did not stop itself at its pause point")

    def wake(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    async def kill(self) -> None:
        """A crashes while frozen: no finally, no release; its lease lives on in Redis."""
        self.killing = True
        os.kill(self.proc.pid, signal.SIGKILL)
        await within(self.proc.wait(), 10)
        self.worker.report("killed", signal="SIGKILL")
        self.worker.end("killed")

    async def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(BaseException):
                await self.reader
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)  # also ends a stopped process
        with contextlib.suppress(Exception):
            await within(self.proc.wait(), 10)


def _proc_state(pid: int) -> str:
    """The process state letter from /proc/<pid>/stat (R, S, T, ...), '?' when unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"


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


# --- claims ----------------------------------------------------------------------------------


def _ev(rec: Record, who: str, event: str) -> dict[str, Any]:
    """`who`'s first `event` in the trace ({} when it never happened)."""
    return next((e for e in rec["trace"] if e["who"] == who and e["event"] == event), {})


def _span(rec: Record, who: str, kind: str) -> dict[str, Any]:
    """`who`'s first span of `kind` ("belief" or "redis") in the timeline ({} when none)."""
    spans = rec["evidence"].get("timeline", {}).get("spans", [])
    return next((s for s in spans if s["who"] == who and s["kind"] == kind), {})


def _both(rec: Record, x: str, y: str) -> tuple[float, float] | None:
    """When x and y both believed they held the lock (None if never)."""
    sx, sy = _span(rec, x, "belief"), _span(rec, y, "belief")
    lo, hi = (
        max(sx.get("start_ms", 0), sy.get("start_ms", 0)),
        min(sx.get("end_ms", 0), sy.get("end_ms", 0)),
    )
    return (lo, hi) if sx and sy and hi > lo else None


def _during(span: tuple[float, float] | None) -> str:
    if span is None:
        return "never"
    return f"{span[1] - span[0]:.0f} ms ({span[0]:.0f}–{span[1]:.0f} ms)"


def _lease(rec: Record, who: str) -> str:
    s = _span(rec, who, "redis")
    return f"{who}'s token {s['ended']} at {s['end_ms']:.0f} ms" if s else f"{who} never held it"


def _release(rec: Record, who: str) -> str:
    e = _ev(rec, who, "release")
    return (
        f"{who} release -> {e['result']} ({e['how']}) at {e['t_ms']:.0f} ms"
        if e
        else f"{who} never released"
    )


def _writes(rec: Record) -> str:
    row = rec["evidence"].get("final_row") or {}
    writes = [
        f"{e['who']} (fence={e['fence']}) writes -> {e['rows']}"
        for e in rec["trace"]
        if e["event"] == "write"
    ]
    return "; ".join(
        [
            *writes,
            f"row {{id: {row.get('id')}, body: {row.get('body')!r}, fence: {row.get('fence')}}}",
        ]
    )


def _third_holder(variant: str) -> ClaimCheck:
    """A's release deletes B's lock; C acquires while B still believes it holds."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        c_got, bc, get = _ev(rec, "C", "got lock"), _both(rec, "B", "C"), _ev(rec, "A", "GET")
        held = (
            _ev(rec, "A", "release").get("result") == 1
            and _span(rec, "B", "redis").get("ended") == "deleted by A"
            and bool(c_got)
            and bc is not None
            # GET-then-DEL: A's GET saw its own token, and B took the lock before A's DEL
            and (
                not get or (get["mine"] and get["t_ms"] < _ev(rec, "B", "got lock").get("t_ms", 0))
            )
        )
        c = f"C got lock, fence={c_got['fence']}" if c_got else "C: lock busy"
        seen = (
            f"A's GET -> {'mine' if get['mine'] else 'not mine'} at {get['t_ms']:.0f} ms; "
            if get
            else ""
        )
        both = f"B and C both held: {_during(bc)}"
        return held, f"{variant}: {seen}{_release(rec, 'A')}; {_lease(rec, 'B')}; {c}; {both}"

    return check


def _c_busy(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    busy = bool(_ev(rec, "C", "lock busy"))
    held = (busy and _ev(rec, "A", "release").get("result") == 0
            and _span(rec, "B", "redis").get("ended") == "expired")  # fmt: skip
    c = "C lock busy" if busy else "C got the lock"
    return held, f"fixed: {_release(rec, 'A')}; {c}; {_lease(rec, 'B')}"


def _lease_window(records: Mapping[str, Record]) -> tuple[bool, str]:
    ab = _both(records["fixed"], "A", "B")
    return ab is not None, f"fixed: A and B both believed they held: {_during(ab)}"


def _fenced(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    aw, bw, row = (
        _ev(rec, "A", "write"),
        _ev(rec, "B", "write"),
        rec["evidence"].get("final_row") or {},
    )
    held = (bool(aw and bw) and (bw["rows"], aw["rows"]) == (1, 0) and bw["t_ms"] < aw["t_ms"]
            and row.get("body") == "from B" and row.get("fence") == bw["fence"])  # fmt: skip
    return held, f"fixed: {_writes(rec)}"


def _stale_write(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    aw, bw = _ev(rec, "A", "write"), _ev(rec, "B", "write")
    held = (
        bool(aw and bw)
        and aw["rows"] == 1
        and bw["t_ms"] < aw["t_ms"]
        and aw["fence"] < bw["fence"]
    )
    return held, f"buggy: {_writes(rec)}"


def _pause_over_ttl(records: Mapping[str, Record]) -> tuple[bool, str]:
    """pause > TTL: A's lease runs out while A believes, and B overlaps; else neither."""
    rec = records["fixed"]
    ttl, pause = rec["params"]["ttl_ms"], rec["params"]["pause_ms"]
    lease, belief, ab = _span(rec, "A", "redis"), _span(rec, "A", "belief"), _both(rec, "A", "B")
    outlived = lease.get("ended") == "expired" and lease["end_ms"] < belief.get("end_ms", 0)
    held = (outlived and ab is not None) if pause > ttl else (not outlived and ab is None)
    both = f"A and B both believed: {_during(ab)}"
    return held, f"fixed: TTL {ttl} ms, pause {pause} ms: {_lease(rec, 'A')}; {both}"


def _killed_blocks(records: Mapping[str, Record]) -> tuple[bool, str]:
    """The dead holder's lease lasts its whole TTL from SET: whoever tries meanwhile is refused."""
    rec = records["holder-killed"]
    ttl = rec["params"]["ttl_ms"]
    got, killed, lease = (
        _ev(rec, "A", "got lock"),
        _ev(rec, "A", "killed"),
        _span(rec, "A", "redis"),
    )
    if not (got and killed and lease):
        return False, "holder-killed: A was not killed after taking the lock"
    tries = [e for e in rec["trace"] if e["who"] != "A" and e["event"] in ("got lock", "lock busy")]
    end = lease["end_ms"]
    lasted, dead = end - got["t_ms"], end - killed["t_ms"]
    held = (lease["ended"] == "expired" and abs(lasted - ttl) <= max(20, ttl / 10) and dead > 0
            and all(e["event"] == "lock busy" for e in tries if e["t_ms"] < end))  # fmt: skip
    who = "; ".join(f"{e['who']} {e['event']} at {e['t_ms']:.0f} ms" for e in tries)
    return held, (
        f"holder-killed: A got the lock at {got['t_ms']:.0f} ms, was killed at "
        f"{killed['t_ms']:.0f} ms; {_lease(rec, 'A')}, {lasted:.0f} ms after SET (TTL {ttl} ms), "
        f"{dead:.0f} ms of it for a dead worker; {who}"
    )


PUBLISHED_DEL = (
    "A: got lock, fence=1 / B: got lock, fence=2 / A: release -> 1 (plain DEL) / "
    "C: got lock, fence=3 / C: release -> 1 (plain DEL) / B: release -> 0 (plain DEL)"
)
PUBLISHED_CAD = (
    "A: got lock, fence=4 / B: got lock, fence=5 / C: lock busy / "
    "A: release -> 0 (compare-and-delete) / B: release -> 0 (compare-and-delete)"
)
PUBLISHED_FENCE = (
    "B (fence=2) writes -> 1 / A wakes up (fence=1) writes -> 0 / "
    "[ { id: 42, body: 'from B', fence: '2' } ]"
)
PUBLISHED_WINDOW = "A và B vẫn chồng nhau trong khoảng 350–500 ms"
PUBLISHED_GET_DEL = (
    "GET rồi DEL từ Node cũng không đủ: giữa hai lệnh lock có thể hết hạn và bị người khác lấy"
)
PUBLISHED_TTL = "Tăng TTL lên 5 phút chỉ làm sự cố hiếm hơn"
PUBLISHED_RECOVERY = "làm recovery khi worker chết chậm hơn 5 phút"
FENCED = ("fixed", "buggy-get-then-del", "holder-killed")
TTL_CASES = ("", "ttl-1000", "ttl-above-pause")  # DL-13 is about the TTL: judged under each


def published_timing(claim: Claim) -> Claim:
    """The claim is about the published story, where A's lease expires before B comes: a
    run whose TTL outlasts A's pause (or B's arrival) does not exercise it (not judged)."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        p = next(iter(records.values()))["params"]
        if not p["pause_ms"] > p["ttl_ms"] <= p["b_at_ms"]:
            return None
        return claim.check(records)

    return replace(claim, check=check)


CLAIMS = (
    *map(published_timing, (
        Claim("DL-10", "Plain DEL: A deletes B's lock and C acquires while B still holds",
              ("buggy",), _third_holder("buggy"), PUBLISHED_DEL),
        Claim("DL-10", "Compare-and-delete: A's release is a no-op and C sees the lock busy",
              ("fixed",), _c_busy, PUBLISHED_CAD),
        Claim("DL-11", "Even with compare-and-delete A and B both believe they hold the lock",
              ("fixed",), _lease_window, PUBLISHED_WINDOW),
        Claim("DL-11", "Fencing: B's write lands, A's stale write changes 0 rows, the row is B's",
              ("fixed",), _fenced, PUBLISHED_FENCE),
        Claim("DL-11", "Without fencing A's stale write lands over B's", ("buggy",), _stale_write),
        invariant_broken("DL-11", "buggy", FENCE_INVARIANT, "Without fencing the fence goes backwards"),
        Claim("DL-12", "GET-then-DEL: the lock expires and is taken between GET and DEL",
              ("buggy-get-then-del",), _third_holder("buggy-get-then-del"), PUBLISHED_GET_DEL),
    )),
    *(invariants_hold("DL-11", v, f"{v}: the fence never goes backwards") for v in FENCED),
    Claim("DL-13", "A pause longer than the TTL overlaps whatever the TTL; a shorter one does not",
          ("fixed",), _pause_over_ttl, PUBLISHED_TTL, cases=TTL_CASES),
    Claim("DL-13", "A killed holder blocks the lock for its whole TTL",
          ("holder-killed",), _killed_blocks, PUBLISHED_RECOVERY, cases=TTL_CASES),
)  # fmt: skip

SCENARIO = Scenario(
    id="lease-gc-pause",
    validate=validate,
    doc=__doc__ or "",
    kind="script",
    variants={
        "buggy": buggy,
        "fixed": fixed,
        "buggy-get-then-del": buggy_get_then_del,
        "holder-killed": holder_killed,
    },
    outcomes=("wrote", "write_rejected", "lock_busy", "killed"),
    claims=CLAIMS,
    published={
        "buggy": PUBLISHED_DEL,
        "fixed": f"{PUBLISHED_CAD}; {PUBLISHED_FENCE}",
    },
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=3, actor_timeout_s=30, run_timeout_s=60),
    params={
        "pause_mode": "sigstop",
        "ttl_ms": TTL_MS,
        "pause_ms": PAUSE_MS,
        "b_at_ms": B_AT_MS,
        "c_at_ms": C_AT_MS,
        "b_work_ms": B_WORK_MS,
        "c_work_ms": C_WORK_MS,
    },
    param_help={
        "pause_mode": "sigstop: A in its own process, frozen by SIGSTOP until SIGCONT; "
        "sleep: A awaits in the lab's event loop",
        "ttl_ms": "the lease: SET ... NX PX ttl_ms",
        "pause_ms": "A's stall, from taking the lease to waking up",
        "b_at_ms": "when B tries (not before A's lease is gone in Redis, when b_at_ms >= ttl_ms)",
        "c_at_ms": "when C tries (after A's release)",
        "b_work_ms": "B's work between its write and its release",
        "c_work_ms": "C's work between its write and its release",
    },
    uses=frozenset({"pg", "redis"}),
    sources=("DL",),
    cases={  # DL-13: a longer TTL with a still longer pause, and a TTL above this pause
        "ttl-1000": {
            "ttl_ms": 1000,
            "pause_ms": 1200,
            "b_at_ms": 1050,
            "c_at_ms": 1250,
            "b_work_ms": 1100,
        },
        "ttl-above-pause": {"ttl_ms": 600},
    },
)
