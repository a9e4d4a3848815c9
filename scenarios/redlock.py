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
Published:  no run in the document; its words (deadlock-distributed-lock-cron.vi.txt,
            the Redlock rebuttal): Redlock rests on timing assumptions (clock drift,
            pauses, bounded network delay); Kleppmann shows it is unsafe without a fencing
            token; antirez answers that the assumptions are acceptable in practice (and
            that a pause after acquiring hurts every auto-expiring lock, not Redlock
            alone); the practical conclusion: fencing at the storage, or consensus with
            revisions; Redis locks, Redlock included, are fine as efficiency locks.
            Where this run sits: on the mechanism both sides accept. A wins 5/5 nodes
            with a positive validity, is frozen after that check, its keys expire, B wins
            5/5, A resumes and writes: both believed they held it, and the validity
            check cannot see it. It does not measure how often such pauses happen (the
            point antirez disputes); it shows that the storage's fence alone stops the
            stale write (fixed: 0 rows), as the document concludes.
See:        claims DL-24; lab/redislock.py (`Redlock`: SET NX PX on every node, majority,
            validity, compare-and-delete on every node); lab/redisnodes.py (the five
            servers, started and stopped by the run); scenarios/_paused_holder.py (the
            steps); scenarios/lease_gc_pause/worker.py (A, the process frozen by SIGSTOP).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from lab.claims import Claim, Record
from lab.errors import LabError
from lab.redislock import Redlock
from lab.scenario import Defaults, Env, Scenario
from scenarios import lease_gc_pause
from scenarios._paused_holder import FENCE_SEQUENCE, Holder, event, fence_claims, overlap
from scenarios.lease_gc_pause.lease_gc_pause import INVOICE_ID
from scenarios.lease_gc_pause.worker import QuorumLease

NODES = 5  # independent masters; the quorum is NODES // 2 + 1 = 3
TTL_MS = 500  # SET lock:invoice:42 <token> NX PX 500 on every node


async def buggy(env: Env) -> None:
    await _run(env, fenced=False)


async def fixed(env: Env) -> None:
    await _run(env, fenced=True)


async def setup(env: Env) -> None:
    await lease_gc_pause.setup(env)
    await env.db.execute(FENCE_SEQUENCE)


async def _run(env: Env, *, fenced: bool) -> None:
    p = env.params
    servers = await env.redis_nodes(p["nodes"])
    env.extra_evidence["nodes"] = servers.info()
    env.extra_evidence["node_pids"] = servers.pids()
    key = env.key(f"lock:invoice:{INVOICE_ID}")  # a fresh server's keys: no prefix needed
    rng = env.rng()
    tokens = {who: f"{who}-{rng.getrandbits(64):016x}" for who in "AB"}
    clients = [aioredis.Redis.from_url(u, retry=Retry(NoBackoff(), 0)) for u in servers.urls()]
    conn = await env.connect()
    cfg = {"who": "A", "redis_urls": servers.urls(), "dsn": env.dsn, "key": key,
           "ttl_ms": p["ttl_ms"], "token": tokens["A"], "fenced": fenced,
           "pause_at": "work"}  # fmt: skip

    def b_lease(b: Holder) -> QuorumLease:
        return QuorumLease(Redlock(clients, key, p["ttl_ms"], tokens["B"]), conn, fenced, b.report)

    try:
        await overlap(env, cfg, clients, b_lease, frozen=True)
    finally:
        for c in clients:
            await c.aclose()


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["nodes"] < 1 or p["ttl_ms"] < 50:
        raise LabError(f"-p nodes={p['nodes']} ttl_ms={p['ttl_ms']}: need nodes >= 1, ttl >= 50")


# --- claims ----------------------------------------------------------------------------------


def _both_believe(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        qa, qb = event(rec, "A", "quorum"), event(rec, "B", "quorum")
        frozen, b = event(rec, "A", "resume"), rec["evidence"].get("beliefs", {})
        held = (bool(qa and qb) and qa["won"] and qb["won"] and b.get("both_ms", 0) > 0
                and frozen.get("frozen_ms", 0) > qa["validity_ms"])  # fmt: skip
        return held, (
            f"{variant}: A won {qa.get('votes')}/{qa.get('nodes')} nodes, validity "
            f"{qa.get('validity_ms')} ms, frozen {frozen.get('frozen_ms')} ms by SIGSTOP; B won "
            f"{qb.get('votes')}/{qb.get('nodes')} (validity {qb.get('validity_ms')} ms); both "
            f"believed they held it for {b.get('both_ms')} ms"
        )

    return Claim(
        "DL-24", f"{variant}: a holder frozen past its validity and a second client that "
        "took the quorum both believe they hold the Redlock", (variant,), check,
        PUBLISHED_TIMING,
    )  # fmt: skip


def _release_deleted_none(rec: Record) -> tuple[bool, str]:
    """A's compare-and-delete found B's token on every node: it deleted no key."""
    rel = event(rec, "A", "release")
    return rel.get("result") == 0, f"A's release deleted {rel.get('result')} keys"


PUBLISHED_TIMING = "Redlock dựa trên giả định về thời gian (clock drift, pause, network delay)"
PUBLISHED_FENCE = "cần fencing ở storage, hoặc hệ đồng thuận có revision"
CLAIMS = (
    _both_believe("buggy"),
    _both_believe("fixed"),
    *fence_claims(
        "DL-24", "resumed",
        "fixed: with the storage's fence the resumed holder's write changes 0 rows",
        PUBLISHED_FENCE, buggy_published="Kleppmann: không có fencing token thì không an toàn",
        also=_release_deleted_none,
    ),
)  # fmt: skip

SCENARIO = Scenario(
    id="redlock",
    validate=validate,
    doc=__doc__ or "",
    kind="script",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("wrote", "write_rejected"),
    claims=CLAIMS,
    published={"fixed": PUBLISHED_FENCE},
    setup=setup,
    invariant=lease_gc_pause.invariant,
    defaults=Defaults(n=2, actor_timeout_s=30, run_timeout_s=60),
    params={"nodes": NODES, "ttl_ms": TTL_MS},
    param_help={
        "nodes": "independent Redis masters the run starts (quorum: a majority)",
        "ttl_ms": "the lock's PX on every node; A stays frozen until it expired on all",
    },
    uses=frozenset({"pg"}),
    sources=("DL",),
    quick={"ttl_ms": 200},
)
