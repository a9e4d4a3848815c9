"""lease-busy-loop: what the document says, how each claim is judged, and the assembly.

Every claim is judged on the run's trace (A's and B's events, stamped on the run's
clock), A's process state read from /proc while B held the lock, and the invoice row
read afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Claim, Record, on_mutant
from lab.core.scenario import Defaults, Param, declare
from scenarios import lease_gc_pause
from scenarios.lease_busy_loop import lease_busy_loop as code
from scenarios.lease_gc_pause.overlap import fence_claims
from scenarios.lease_gc_pause.reading import event

IDLE = "mutant-idle-loop"


def _overlap(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        busy, idle = event(rec, "A", "busy"), event(rec, "A", "idle")
        got_b, b = event(rec, "B", "got lock"), rec["evidence"].get("beliefs", {})
        state = rec["evidence"].get("a_state_after_b_write")
        held = (
            bool(busy and idle and got_b)
            and not event(rec, "A", "stall")
            and busy["t_ms"] < got_b["t_ms"] < idle["t_ms"]
            and idle["busy_ms"] > rec["params"]["ttl_ms"]
            and state == "R"
            and b.get("both_ms", 0) > 0
        )
        return held, (
            f"{variant}: A's loop busy {idle.get('busy_ms')} ms in json.loads of "
            f"{busy.get('chars', 0) / 1e6:.1f} MB (TTL {rec['params']['ttl_ms']} ms, no "
            f"SIGSTOP, process state {state!r} while B held it); B got the lock at "
            f"{got_b.get('t_ms')} ms; both believed they held it for {b.get('both_ms')} ms"
        )

    claim = Claim(
        "DL-25",
        f"{variant}: the lease expires under a holder busy in its own event loop, "
        "and a second client takes it while the first still believes",
        (variant,),
        check,
        PUBLISHED,
    )
    # both variants busy A alike: the counterfactual is the code run with A's loop idle
    return on_mutant(claim, IDLE)


PUBLISHED = "event loop block bởi JSON lớn; lease nào cũng có cửa sổ này"
CLAIMS = (
    _overlap("buggy"),
    _overlap("fixed"),
    *fence_claims(
        "DL-25",
        "busy",
        "fixed: the storage's fence stops the busy holder's write (0 rows)",
        "fencing token ở storage để chặn write cũ",
    ),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed},
    mutants={IDLE: code.idle_holder},
    outcomes=("wrote", "write_rejected"),
    claims=CLAIMS,
    published={"fixed": PUBLISHED},
    setup=lease_gc_pause.setup,
    invariant=lease_gc_pause.invariant,
    defaults=Defaults(n=2, actor_timeout_s=30, run_timeout_s=60),
    params={
        "ttl_ms": Param(code.TTL_MS, "the lease: SET ... NX PX ttl_ms", min=1),
        "busy_rows": Param(
            code.BUSY_ROWS,
            "objects in the JSON A parses in its own event loop (its busy spell)",
            min=1,
        ),
    },
    uses=frozenset({"pg", "redis"}),
    sources=("DL",),
)
