"""Lease busy loop: the lease expires under a holder that never stopped running.

Symptom:    two workers wrote the same invoice; nothing was paused, killed or slow on the
            network: the first holder was "still running" the whole time.
Root cause: a lease expires on the server's clock, whatever the holder is doing. A holder
            whose event loop is busy with CPU work (here one large `json.loads`; a slow
            `await` does the same) runs none of its other coroutines: no renewal, no
            timeout, no check of the lease. Redis lets the key expire, B takes the lock,
            and A's code goes on to its write as if it still held it: the lease-gc-pause
            overlap without a GC pause or SIGSTOP.
Fix:        the same as for a pause: the storage's fence. Each lease INCRs a fence and the
            write is `UPDATE invoices ... WHERE id = 42 AND fence < $1`; A's write after
            its busy spell changes 0 rows (fixed). buggy writes without the fence. Both
            release by compare-and-delete.
Published:  no run; the document lists it among the ways a lease expires mid-work: "GC
            pause, await một call chậm, event loop block bởi JSON lớn; lease nào cũng có
            cửa sổ này" (deadlock-distributed-lock-cron.vi.txt, edge cases).
See:        claims DL-25 in claims.py; `story` below (its steps, on the actions redlock uses
            too: scenarios/lease_gc_pause/overlap.py);
            scenarios/lease_gc_pause/worker.py (A, a process whose stall is `stall: cpu`); the
            lease-gc-pause scenario (the same window with SIGSTOP). The busy spell is
            BUSY_ROWS objects of JSON (~470 ms on an idle core here, more under load),
            against a TTL of TTL_MS; the record keeps both and A's process state ('R')
            read from /proc while B held the lock.
"""

from __future__ import annotations

from lab.core.scenario import Env
from lab.pinned.timed import Step
from scenarios.lease_gc_pause.lease_gc_pause import INVOICE_ID, Lease
from scenarios.lease_gc_pause.overlap import Holder, Overlap

TTL_MS = 150  # SET lock:invoice:42 <token> NX PX 150
BUSY_ROWS = 200_000  # objects in the JSON A parses in its event loop (~13 MB)


def story(o: Overlap) -> list[Step]:
    """A's loop is busy past the TTL; its key expires; B wins; A's loop runs on by itself."""
    return [
        Step(0, "A takes the lock and its loop is busy", o.start_a, o.a.stalled),
        Step(0, "A's key expires", o.key_gone, o.gone),
        Step(0, "B takes the lock and writes", o.start_b, o.b.turn),
        Step(0, "A's loop runs on: it writes and releases", o.nothing, o.a.done),
        Step(0, "B releases", o.nothing, o.b.done),
    ]


async def buggy(env: Env) -> None:
    await _run(env, fenced=False)


async def fixed(env: Env) -> None:
    await _run(env, fenced=True)  # the whole fix: the write carries the lease's fence


async def idle_holder(env: Env) -> None:
    """A code mutant (Scenario.mutants, a counterfactual only): buggy with A's busy spell
    dropped (one JSON object), the one thing the overlap claim rests on."""
    await _run(env, fenced=False, busy_rows=1)


async def _run(env: Env, *, fenced: bool, busy_rows: int | None = None) -> None:
    p = env.params
    key = env.key(f"lock:invoice:{INVOICE_ID}")
    fence_key = env.key(f"lock:invoice:{INVOICE_ID}:fence")
    rng = env.rng()
    tokens = {who: f"{who}-{rng.getrandbits(64):016x}" for who in "AB"}
    conn = await env.connect()
    cfg = {
        "who": "A",
        "redis_url": env.redis_url,
        "dsn": env.dsn,
        "key": key,
        "fence_key": fence_key,
        "ttl_ms": p["ttl_ms"],
        "token": tokens["A"],
        "release": "cad",
        "fenced": fenced,
        "pause_at": "work",
        "stall": "cpu",
        "busy_rows": p["busy_rows"] if busy_rows is None else busy_rows,
    }

    def b_lease(b: Holder) -> Lease:
        return Lease(
            env.redis, conn, key, fence_key, p["ttl_ms"], tokens["B"], "cad", fenced, b.report
        )

    env.extra_evidence["ttl_ms"] = p["ttl_ms"]
    await Overlap(env, cfg, [env.redis], b_lease).run(story)
