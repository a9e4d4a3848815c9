"""redlock: what the document says, how each claim is judged, and the assembly.

Published, in full: no run in the document; its words (deadlock-distributed-lock-cron.vi.txt,
the Redlock rebuttal): Redlock rests on timing assumptions (clock drift, pauses, bounded
network delay); Kleppmann shows it is unsafe without a fencing token; antirez answers that
the assumptions are acceptable in practice (and that a pause after acquiring hurts every
auto-expiring lock, not Redlock alone); the practical conclusion: fencing at the storage,
or consensus with revisions; Redis locks, Redlock included, are fine as efficiency locks.

Where this run sits: on the mechanism both sides accept. A wins 5/5 nodes with a
positive validity, is frozen after that check, its keys expire, B wins 5/5, A resumes
and writes: both believed they held it, and the validity check cannot see it. It does
not measure how often such pauses happen (the point antirez disputes); it shows that the
storage's fence alone stops the stale write (fixed: 0 rows), as the document concludes.
Every claim is judged on the run's trace (A's and B's events, stamped on the run's
clock) and the invoice row read afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Claim, Record, on_mutant
from lab.core.scenario import Defaults, Param, declare
from scenarios import lease_gc_pause
from scenarios.lease_gc_pause.overlap import fence_claims
from scenarios.lease_gc_pause.reading import event
from scenarios.redlock import redlock as code

UNFROZEN = "mutant-unfrozen"


def _both_believe(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        qa, qb = event(rec, "A", "quorum"), event(rec, "B", "quorum")
        frozen, b = event(rec, "A", "resume"), rec["evidence"].get("beliefs", {})
        held = (
            bool(qa and qb)
            and qa["won"]
            and qb["won"]
            and b.get("both_ms", 0) > 0
            and frozen.get("frozen_ms", 0) > qa["validity_ms"]
        )
        return held, (
            f"{variant}: A won {qa.get('votes')}/{qa.get('nodes')} nodes, validity "
            f"{qa.get('validity_ms')} ms, frozen {frozen.get('frozen_ms')} ms by SIGSTOP; B won "
            f"{qb.get('votes')}/{qb.get('nodes')} (validity {qb.get('validity_ms')} ms); both "
            f"believed they held it for {b.get('both_ms')} ms"
        )

    claim = Claim(
        "DL-24",
        f"{variant}: a holder frozen past its validity and a second client that "
        "took the quorum both believe they hold the Redlock",
        (variant,),
        check,
        PUBLISHED_TIMING,
        timing=True,  # seen once not held at load 9: a machine that late is the machine's doing
    )
    # both variants freeze A alike: the counterfactual is the code run with A unfrozen
    return on_mutant(claim, UNFROZEN)


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
        "DL-24",
        "resumed",
        "fixed: with the storage's fence the resumed holder's write changes 0 rows",
        PUBLISHED_FENCE,
        buggy_published="Kleppmann: không có fencing token thì không an toàn",
        also=_release_deleted_none,
    ),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed},
    mutants={UNFROZEN: code.unfrozen_holder},
    outcomes=("wrote", "write_rejected"),
    claims=CLAIMS,
    published={"fixed": PUBLISHED_FENCE},
    invariant=lease_gc_pause.invariant,
    defaults=Defaults(n=2, actor_timeout_s=30, run_timeout_s=60),
    params={
        "nodes": Param(
            code.NODES, "independent Redis masters the run starts (quorum: a majority)", min=1
        ),
        "ttl_ms": Param(
            code.TTL_MS,
            "the lock's PX on every node; A stays frozen until it expired on all",
            min=50,
        ),
    },
    uses=frozenset({"pg"}),
    # DL-24 is a freeze against the lock's validity in real time: on lanes beside CPU-bound
    # runs the holder was frozen 188 ms of a 192 ms validity and the claim turned
    timed=("",),
    sources=("DL",),
    quick={"ttl_ms": 200},
)
