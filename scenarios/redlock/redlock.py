"""Redlock: five Redis masters, a quorum lock, and a holder frozen past its validity.

Symptom:    the invoice was written by two workers although both took the "safe" Redlock:
            each had won 3 or more of 5 independent Redis masters, within the validity.
Root cause: Redlock gives its holder a belief with a deadline (validity = TTL - drift -
            time spent acquiring), measured on the holder's clock at acquisition. A
            holder that stops running after that check (GC pause, SIGSTOP, VM suspend)
            cannot see the deadline pass: the keys expire on every node, another client
            wins the quorum, and the first one resumes and writes as if it still held it.
            No client-side check can close this window; the nodes have no shared counter.
Fix:        fencing at the storage: each holder gets a number from the storage (a
            PostgreSQL sequence, once it holds the quorum) and the write is
            `UPDATE invoices ... WHERE id = 42 AND fence < $1`: the resumed holder's write
            changes 0 rows (fixed). buggy writes without the fence.
Published:  no run in the document; its words (deadlock-distributed-lock-cron.vi.txt, the
            Redlock rebuttal): Redlock rests on timing assumptions; Kleppmann shows it is
            unsafe without a fencing token; the practical conclusion: fencing at the
            storage, or consensus with revisions. Where this run sits: claims.py.
See:        claims DL-24 in claims.py; lab/kit/redislock.py (`Redlock`: SET NX PX on every
            node, majority, validity, compare-and-delete on every node); lab/servers/redisnodes.py
            (the five servers, started and stopped by the run); `story` below, on the
            actions of scenarios/lease_gc_pause/overlap.py; lease_gc_pause/worker.py (A,
            the process frozen by SIGSTOP; `QuorumLease`, the write with or without the
            fence).
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from lab.core.scenario import Env
from lab.kit.redislock import Redlock
from lab.pinned.timed import Step
from scenarios import lease_gc_pause
from scenarios.lease_gc_pause.lease_gc_pause import INVOICE_ID
from scenarios.lease_gc_pause.overlap import FENCE_SEQUENCE, Holder, Overlap
from scenarios.lease_gc_pause.worker import QuorumLease

NODES = 5  # independent masters; the quorum is NODES // 2 + 1 = 3
TTL_MS = 500  # SET lock:invoice:42 <token> NX PX 500 on every node


def story(o: Overlap) -> list[Step]:
    """A is frozen (SIGSTOP) past its validity; its keys expire; B wins; A is woken."""
    return [
        Step(0, "A takes the lock and stalls", o.start_a, o.a.stalled),
        Step(0, "A's key expires on every node", o.key_gone, o.gone),
        Step(0, "B takes the lock and writes", o.start_b, o.b.turn),
        Step(0, "A wakes (SIGCONT), writes and releases", o.wake_a, o.a.done),
        Step(0, "B releases", o.nothing, o.b.done),
    ]


def unfrozen(o: Overlap) -> list[Step]:
    """The mutant's story: A is never frozen; it writes and releases before B tries."""
    return [
        Step(0, "A takes the lock, writes and releases", o.start_a, o.a.done),
        Step(0, "B takes the lock and writes", o.start_b, o.b.turn),
        Step(0, "B releases", o.nothing, o.b.done),
    ]


async def buggy(env: Env) -> None:
    await _run(env, fenced=False)


async def fixed(env: Env) -> None:
    await _run(env, fenced=True)  # the whole fix: the write carries the storage's fence


async def unfrozen_holder(env: Env) -> None:
    """A code mutant (Scenario.mutants, a counterfactual only): buggy with A's pause
    dropped, the one thing the overlap claim rests on."""
    await _run(env, fenced=False, frozen=False)


async def setup(env: Env) -> None:
    await lease_gc_pause.setup(env)
    await env.db.execute(FENCE_SEQUENCE)


async def _run(env: Env, *, fenced: bool, frozen: bool = True) -> None:
    p = env.params
    servers = await env.redis_nodes(p["nodes"])
    env.extra_evidence["nodes"] = servers.info()
    env.extra_evidence["node_pids"] = servers.pids()
    key = env.key(f"lock:invoice:{INVOICE_ID}")  # a fresh server's keys: no prefix needed
    rng = env.rng()
    tokens = {who: f"{who}-{rng.getrandbits(64):016x}" for who in "AB"}
    clients = [aioredis.Redis.from_url(u, retry=Retry(NoBackoff(), 0)) for u in servers.urls()]
    conn = await env.connect()
    cfg = {
        "who": "A",
        "redis_urls": servers.urls(),
        "dsn": env.dsn,
        "key": key,
        "ttl_ms": p["ttl_ms"],
        "token": tokens["A"],
        "fenced": fenced,
        "pause_at": "work" if frozen else None,
    }

    def b_lease(b: Holder) -> QuorumLease:
        return QuorumLease(Redlock(clients, key, p["ttl_ms"], tokens["B"]), conn, fenced, b.report)

    try:
        await Overlap(env, cfg, clients, b_lease).run(story if frozen else unfrozen)
    finally:
        for c in clients:
            await c.aclose()
