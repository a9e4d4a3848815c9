"""A holder that stalls past its lease while a second client takes the lock: the actions of
that story and the claims made of it, for redlock and lease-busy-loop (each declares its
story's steps in its own module; lab.pinned.timed runs them).

A runs in its own process (the lease worker, worker.py, one protocol for every holder the
lab stalls); B runs in the lab's event loop. The steps, each after the event it waits
for, never after a guessed time:

1. A takes the lock and stalls (SIGSTOP, or its own event loop busy), before its write.
2. Redis reports A's key gone on every node (PX expiry, polled with GET).
3. B takes the lock and writes with its fence; B then works until A is done.
4. A resumes (SIGCONT; a busy A resumes by itself), writes with its older fence, releases.
5. B releases.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis

from lab.aio import until
from lab.core.claims import Claim, Record, invariant_broken, invariants_hold
from lab.core.scenario import Env
from lab.errors import ScenarioFailure
from lab.pinned.timed import Actor, ProcessActor, Step, bounded, end_all, raised, run_steps
from lab.procs.workers import proc_state
from scenarios.lease_gc_pause.choreography import WorkerProcess
from scenarios.lease_gc_pause.fence import FENCE_INVARIANT
from scenarios.lease_gc_pause.lease_gc_pause import INVOICE_ID, Lease, hold
from scenarios.lease_gc_pause.reading import event, fence_rejected_a, writes
from scenarios.lease_gc_pause.worker import QuorumLease

GONE_POLL_S = 0.001  # how often the lab looks for A's key on the nodes
STEP_LIMIT_S = 20.0  # every step ends within this after the TTL, or the run fails naming it
FENCE_SEQUENCE = "CREATE SEQUENCE invoice_fence"  # Redlock's fences come from the storage


class Holder(Actor):
    """A or B: a busy event loop counts as the stall, as SIGSTOP does."""

    def report(self, event: str, *, at_ms: float | None = None, **fields: Any) -> None:
        super().report(event, at_ms=at_ms, **fields)
        if event == "busy":
            self.stalled.set()


class Overlap:
    """The story's actors and what each step does: A in `cfg`'s worker process, B's lease
    built by `b_lease`, A's key read on `nodes`."""

    def __init__(
        self,
        env: Env,
        cfg: dict[str, Any],
        nodes: Sequence[aioredis.Redis],
        b_lease: Callable[[Holder], Lease | QuorumLease],
    ) -> None:
        self.env = env
        self.cfg = cfg
        self.nodes = nodes
        self.b_lease = b_lease
        self.a = Holder(env, "A")
        self.b = Holder(env, "B")
        self.limit = env.params["ttl_ms"] / 1000 + STEP_LIMIT_S
        self.gone = asyncio.Event()  # A's key is gone on every node
        self.proc: ProcessActor | None = None
        self.tasks: list[asyncio.Task[None]] = []

    def start_a(self) -> None:
        assert self.proc is not None
        self.proc.go()

    async def key_gone(self) -> None:
        """Poll every node until none holds A's token (its PX expiry), then say so."""
        polls = itertools.count(1)
        key, token = self.cfg["key"], self.cfg["token"]

        async def released() -> bool:
            values = await asyncio.gather(*(n.get(key) for n in self.nodes))
            self.env.extra_evidence["gone_polls"] = next(polls)
            return all(v not in (token, token.encode()) for v in values)

        what = f"{self.env.scenario} / {self.env.variant}: A's key to expire on every node"
        await until(released, self.limit, what, every=GONE_POLL_S)
        self.env.trace("redis", f"A's key gone on all {len(self.nodes)} node(s)")
        self.gone.set()

    def start_b(self) -> None:
        """B takes the lock and writes; it works on until A is done: both believe."""

        async def work() -> None:
            what = "A to finish while B holds the lock"
            label = f"{self.env.scenario} / {self.env.variant}"
            await bounded(self.a.done, what, self.limit, label)

        body = hold(self.b_lease(self.b), "B", pause_at=None, stall=_noop, work=work)
        self.tasks.append(asyncio.create_task(self.b.run(body)))

    def wake_a(self) -> None:
        assert self.proc is not None
        self.proc.wake()

    def nothing(self) -> None:
        """A step whose actor goes on by itself: the step waits for its event only."""

    def check(self, step: str) -> None:
        """After each step: a failed worker or B fails the run; A took the lock before it
        stalled; once B wrote, the kernel's view of A (T: stopped, R: running, busy)."""
        env = self.env
        if self.proc is not None and self.proc.error:
            raise ScenarioFailure(f"{env.scenario} / {env.variant}: {self.proc.error}")
        if (exc := raised(self.tasks)) is not None:
            raise ScenarioFailure(f"{env.scenario}: B raised {exc!r}")
        if self.a.stalled.is_set() and "got lock" not in self.a.seen:
            raise ScenarioFailure(f"{env.scenario}: A did not get the lock: {sorted(self.a.seen)}")
        state = "a_state_after_b_write"
        if self.b.turn.is_set() and state not in env.extra_evidence and self.proc is not None:
            env.extra_evidence[state] = proc_state(self.proc.proc.pid)

    async def run(self, story: Callable[[Overlap], list[Step]]) -> None:
        """Run `story`'s steps with A's process up; then the outcomes, the row, the beliefs."""
        env = self.env
        self.proc = await WorkerProcess.start(env, self.a, self.cfg)
        try:
            env.t0 = time.perf_counter()  # the clock starts with A; both are connected
            await run_steps(env, story(self), self.limit, self.check)
        finally:
            await end_all(self.tasks, [self.proc], [])
        for w in (self.a, self.b):
            env.outcome(w.outcome or "unfinished")
        row = await env.db.fetchrow(
            "SELECT id, body, fence FROM invoices WHERE id = $1", INVOICE_ID
        )
        env.extra_evidence["final_row"] = dict(row) if row else None
        env.extra_evidence["beliefs"] = beliefs(env.events)


async def _noop() -> None:
    return None


def beliefs(trace: list[dict[str, Any]]) -> dict[str, Any]:
    """Each holder's belief (got lock -> release) and when both believed at once."""
    span: dict[str, list[float]] = {}
    for e in trace:
        if e["event"] == "got lock":
            span[e["who"]] = [e["t_ms"], e["t_ms"]]
        elif e["event"] == "release" and e["who"] in span:
            span[e["who"]][1] = e["t_ms"]
    out: dict[str, Any] = {w: {"from_ms": s[0], "to_ms": s[1]} for w, s in span.items()}
    if "A" in span and "B" in span:
        lo, hi = max(span["A"][0], span["B"][0]), min(span["A"][1], span["B"][1])
        out["both_ms"] = round(hi - lo, 1) if hi > lo else 0.0
        out["both_from_ms"], out["both_to_ms"] = lo, hi
    return out


def fenced_verdict(rec: Record) -> tuple[bool, str]:
    """B's write lands (1 row), A's later stale write changes 0 rows, the row is B's."""
    return fence_rejected_a(rec), writes(rec)


def stale_verdict(rec: Record) -> tuple[bool, str]:
    """Without the fence A's later write lands over B's: the row has the older fence."""
    aw, bw = event(rec, "A", "write"), event(rec, "B", "write")
    row = rec["evidence"].get("final_row") or {}
    held = bool(aw and bw) and aw["rows"] == 1 and bw["t_ms"] < aw["t_ms"]
    return held and row.get("body") == "from A" and aw["fence"] < bw["fence"], writes(rec)


def fence_claims(
    cid: str,
    holder: str,
    fixed: str,
    published: str,
    *,
    buggy_published: str = "",
    also: Callable[[Record], tuple[bool, str]] | None = None,
) -> tuple[Claim, ...]:
    """The four claims both scenarios make of the storage's fence, in this order: fixed, A's
    stale write changes 0 rows (`fixed` says so; `also` is a further check on the fixed
    record); buggy, the `holder` holder's stale write lands over B's; the invoice's fence
    goes backwards in buggy and never in fixed."""

    def fenced(records: Mapping[str, Record]) -> tuple[bool, str]:
        held, seen = fenced_verdict(records["fixed"])
        if also is not None:
            more, said = also(records["fixed"])
            held, seen = held and more, f"{seen}; {said}"
        return held, f"fixed: {seen}"

    def stale(records: Mapping[str, Record]) -> tuple[bool, str]:
        held, seen = stale_verdict(records["buggy"])
        return held, f"buggy: {seen}"

    stale_text = f"buggy: without a fence the {holder} holder's stale write lands over B's"
    return (
        Claim(cid, fixed, ("fixed",), fenced, published),
        Claim(cid, stale_text, ("buggy",), stale, buggy_published),
        invariant_broken(
            cid, "buggy", FENCE_INVARIANT, "buggy: the invoice's fence goes backwards"
        ),
        invariants_hold(
            cid, "fixed", "fixed: the invoice's fence never goes backwards", counterfactual=None
        ),
    )
