"""lease-gc-pause: what the documents claim, how each claim is judged, and the assembly.

The invariant (the fence never goes backwards) is read from a log of every write that
landed, which a trigger keeps: observation added to the code's own setup.

Every load claim is judged on one run per variant of the published story (SCHEDULE in
choreography.py, run at its times): the trace of what each holder did, the
timeline of when each believed it held the lock against when Redis held its token, and
the final row. DL-10..DL-12 are about the published timing (A's lease expires before B
comes); DL-13 is judged under every TTL case. The explore claims are judged on the
pinned schedules (schedules.py): every order of the pause, the wake and the writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lab.core.claims import Check as ClaimCheck
from lab.core.claims import Claim, NotJudged, Record, invariant_broken, invariants_hold, mutation
from lab.core.scenario import Check, Defaults, Env, Param, Scenario
from lab.pinned import broke_in_some, kept_in_all, on_canonical
from scenarios.lease_gc_pause import choreography, schedules
from scenarios.lease_gc_pause import lease_gc_pause as code

TTL_MS = 300  # SET lock:invoice:42 <token> NX PX 300
PAUSE_MS = 500  # A's stall
B_AT_MS = 350
C_AT_MS = 550
B_WORK_MS = 400  # B outlives its own lease too: its release finds the key gone (-> 0)
C_WORK_MS = 100  # C releases before B, as in the published trace
# quick: the same story on a shorter clock. TTL and pause shrink (pause > TTL still, 1.5x
# instead of 1.67x); every gap the story does not order by events keeps its length: B
# comes 50 ms after A's lease ends and C 50 ms after A wakes, C tries 100 ms before B's
# lease ends (C busy under compare-and-delete) and B releases 100 ms after it (-> 0).
# A's run ends at ~550 ms instead of ~755 ms.
QUICK = {"ttl_ms": 200, "pause_ms": 300, "b_at_ms": 250, "c_at_ms": 350, "b_work_ms": 300}
FENCE_INVARIANT = "fence never goes backwards"
# observation only: every write that landed, with the fence it replaced
WRITE_LOG = """
    CREATE TABLE invoice_writes (seq bigserial PRIMARY KEY, old_fence bigint,
                                 new_fence bigint, body text);
    CREATE FUNCTION log_invoice_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
      INSERT INTO invoice_writes (old_fence, new_fence, body)
      VALUES (OLD.fence, NEW.fence, NEW.body); RETURN NEW; END $$;
    CREATE TRIGGER invoice_writes AFTER UPDATE ON invoices
      FOR EACH ROW EXECUTE FUNCTION log_invoice_write();"""


async def schema(env: Env) -> None:
    """The code's own tables, and the log of writes the invariant reads."""
    await code.schema(env)
    await env.db.execute(WRITE_LOG)


async def setup(env: Env) -> None:
    """The tables and the invoice, in one (what redlock and lease-busy-loop reuse)."""
    await schema(env)
    await code.setup(env)


async def invariant(env: Env) -> list[Check]:
    """The invoice's fence never went backwards: no holder with an older lease wrote last."""
    rows = await env.db.fetch("SELECT old_fence, new_fence, body FROM invoice_writes ORDER BY seq")
    back = [
        f"{w['body']} wrote fence {w['new_fence']} over {w['old_fence']}"
        for w in rows
        if w["new_fence"] <= w["old_fence"]
    ]
    done = ", ".join(f"{w['old_fence']}->{w['new_fence']}" for w in rows) or "no writes"
    return [Check(FENCE_INVARIANT, not back, "; ".join(back) or done)]


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
    held = (
        busy
        and _ev(rec, "A", "release").get("result") == 0
        and _span(rec, "B", "redis").get("ended") == "expired"
    )
    c = "C lock busy" if busy else "C got the lock"
    return held, f"fixed: {_release(rec, 'A')}; {c}; {_lease(rec, 'B')}"


def _lease_window(records: Mapping[str, Record]) -> tuple[bool, str]:
    ab = _both(records["fixed"], "A", "B")
    return ab is not None, f"fixed: A and B both believed they held: {_during(ab)}"


def _belief_ends_with_lease(rec: Record) -> None:
    """A stops believing when Redis ends its lease: a lease without the window."""
    _span(rec, "A", "belief")["end_ms"] = _span(rec, "A", "redis")["end_ms"]


def _fenced(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    aw, bw, row = (
        _ev(rec, "A", "write"),
        _ev(rec, "B", "write"),
        rec["evidence"].get("final_row") or {},
    )
    held = (
        bool(aw and bw)
        and (bw["rows"], aw["rows"]) == (1, 0)
        and bw["t_ms"] < aw["t_ms"]
        and row.get("body") == "from B"
        and row.get("fence") == bw["fence"]
    )
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


def _overlap_flipped(rec: Record) -> None:
    """The overlap the pause against the TTL would not decide: over the TTL, B never gets
    the lock; under it, B gets it at its time while A is still paused."""
    p, spans = rec["params"], rec["evidence"]["timeline"]["spans"]
    if p["pause_ms"] > p["ttl_ms"]:
        spans[:] = [s for s in spans if (s["who"], s["kind"]) != ("B", "belief")]
        return
    end = _span(rec, "A", "belief")["end_ms"] + p["b_work_ms"]
    b = {"start_ms": p["b_at_ms"], "end_ms": end, "label": "mutated: B got in while A slept"}
    spans.insert(0, {"who": "B", "kind": "belief", **b})


def _killed_blocks(records: Mapping[str, Record]) -> tuple[bool, str]:
    """The dead holder's lease lasts its whole TTL from SET: whoever tries meanwhile is refused."""
    rec = records["holder-killed"]
    ttl = rec["params"]["ttl_ms"]
    got, killed, lease = (
        _ev(rec, "A", "got lock"),
        _ev(rec, "A", "killed"),
        _span(rec, "A", "redis"),
    )
    if not (got and killed and lease):  # the run did not make the dead holder
        raise NotJudged("holder-killed: A was not killed after taking the lock")
    tries = [e for e in rec["trace"] if e["who"] != "A" and e["event"] in ("got lock", "lock busy")]
    end = lease["end_ms"]
    lasted, dead = end - got["t_ms"], end - killed["t_ms"]
    held = (
        lease["ended"] == "expired"
        and abs(lasted - ttl) <= max(20, ttl / 10)
        and dead > 0
        and all(e["event"] == "lock busy" for e in tries if e["t_ms"] < end)
    )
    who = "; ".join(f"{e['who']} {e['event']} at {e['t_ms']:.0f} ms" for e in tries)
    return held, (
        f"holder-killed: A got the lock at {got['t_ms']:.0f} ms, was killed at "
        f"{killed['t_ms']:.0f} ms; {_lease(rec, 'A')}, {lasted:.0f} ms after SET (TTL {ttl} ms), "
        f"{dead:.0f} ms of it for a dead worker; {who}"
    )


def _lease_ends_at_death(rec: Record) -> None:
    """A's lease ends when A dies, as a lock tied to its holder's connection would."""
    lease = _span(rec, "A", "redis")
    lease.update(end_ms=_ev(rec, "A", "killed")["t_ms"], ended="released at A's death")


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


def _results(run: Mapping[str, Any]) -> dict[str, str]:
    """A pinned run's transcript as step -> result ("A release" -> "-> 1"), in its order."""
    lines = run["transcript"].splitlines()[1:]
    return {" ".join(ln.split()[:2]): ln.rsplit("  ", 1)[-1].strip() for ln in lines}


def _pinned_third_holder(run: Mapping[str, Any]) -> tuple[bool, str]:
    """Plain DEL, pinned: A's release deletes B's lock, C gets it, then B's release finds none."""
    r = _results(run)
    order = [k for k in r if k in ("A release", "C acquire", "B release")]
    held = (
        r.get("A release") == "-> 1"
        and r.get("C acquire", "").startswith("-> OK")
        and r.get("B release") == "-> 0"
        and order == ["A release", "C acquire", "B release"]
    )
    return held, "published: " + "; ".join(f"{k} {r.get(k)}" for k in order)


def _pinned_busy(run: Mapping[str, Any]) -> tuple[bool, str]:
    """Compare-and-delete, pinned: A's release is a no-op, C is refused, B's release is B's."""
    r = _results(run)
    keys = ("A write", "A release", "C acquire", "B release")
    held = (
        r.get("A write") == "-> UPDATE 0"
        and r.get("A release") == "-> 0"
        and r.get("C acquire") == "-> busy"
        and r.get("B release") == "-> 1"
    )
    return held, "published: " + "; ".join(f"{k} {r.get(k)}" for k in keys)


ORDERS = "the orders of A's acquire, pause, wake and write against B's acquire and write"
# Judged by the published profile only: explore starts a worker process per interleaving
# (32 runs for buggy and fixed, about a minute on a shared 2-core machine).
PINNED_ONLY = ("published",)
EXPLORE_CLAIMS = tuple(
    replace(c, profiles=PINNED_ONLY)
    for c in (
        broke_in_some(
            "DL-11",
            "buggy",
            f"Without fencing, some of {ORDERS} let A's stale write land: the fence goes backwards",
        ),
        kept_in_all(
            "DL-11", "fixed", f"With fencing, none of {ORDERS} lets the fence go backwards"
        ),
        *(
            kept_in_all(
                "DL-11", v, f"{v}: fenced, no order of its pinned steps lets the fence go backwards"
            )
            for v in ("buggy-get-then-del", "holder-killed")
        ),
        on_canonical(
            "DL-10",
            "buggy",
            "published",
            "Pinned, plain DEL: A's release deletes B's lock and C gets in while B holds",
            _pinned_third_holder,
            published=PUBLISHED_DEL,
        ),
        on_canonical(
            "DL-10",
            "fixed",
            "published",
            "Pinned, compare-and-delete: A's release is a no-op and C is refused",
            _pinned_busy,
            published=PUBLISHED_CAD,
        ),
    )
)

CLAIMS = (
    *map(
        published_timing,
        (
            Claim(
                "DL-10",
                "Plain DEL: A deletes B's lock and C acquires while B still holds",
                ("buggy",),
                _third_holder("buggy"),
                PUBLISHED_DEL,
            ),
            Claim(
                "DL-10",
                "Compare-and-delete: A's release is a no-op and C sees the lock busy",
                ("fixed",),
                _c_busy,
                PUBLISHED_CAD,
            ),
            Claim(
                "DL-11",
                "Even with compare-and-delete A and B both believe they hold the lock",
                ("fixed",),
                _lease_window,
                PUBLISHED_WINDOW,
                # every variant has the window: its counterfactual is a lease without one
                counterfactual=mutation("fixed", _belief_ends_with_lease),
            ),
            Claim(
                "DL-11",
                "Fencing: B's write lands, A's stale write changes 0 rows, the row is B's",
                ("fixed",),
                _fenced,
                PUBLISHED_FENCE,
            ),
            Claim(
                "DL-11", "Without fencing A's stale write lands over B's", ("buggy",), _stale_write
            ),
            invariant_broken(
                "DL-11", "buggy", FENCE_INVARIANT, "Without fencing the fence goes backwards"
            ),
            Claim(
                "DL-12",
                "GET-then-DEL: the lock expires and is taken between GET and DEL",
                ("buggy-get-then-del",),
                _third_holder("buggy-get-then-del"),
                PUBLISHED_GET_DEL,
            ),
        ),
    ),
    *(invariants_hold("DL-11", v, f"{v}: the fence never goes backwards") for v in FENCED),
    Claim(
        "DL-13",
        "A pause longer than the TTL overlaps whatever the TTL; a shorter one does not",
        ("fixed",),
        _pause_over_ttl,
        PUBLISHED_TTL,
        cases=TTL_CASES,
        # buggy overlaps alike: the counterfactual is the overlap the pause did not predict
        counterfactual=mutation("fixed", _overlap_flipped),
        unjudged=(
            "rarer: how often a pause outlasts the TTL (the lab picks both)",
            "a 5-minute TTL (the lab's TTLs run 200-1000 ms)",
        ),
    ),
    Claim(
        "DL-13",
        "A killed holder blocks the lock for its whole TTL",
        ("holder-killed",),
        _killed_blocks,
        PUBLISHED_RECOVERY,
        cases=TTL_CASES,
        # a swap has no dead holder to judge: the counterfactual is a lease that dies with A
        counterfactual=mutation("holder-killed", _lease_ends_at_death),
        unjudged=("recovery 5 minutes slower (the lab's TTLs run 200-1000 ms)",),
    ),
    *EXPLORE_CLAIMS,
)


SCENARIO = Scenario(
    id="lease-gc-pause",
    doc=code.__doc__ or "",
    kind="script",
    variants={name: choreography.variant(c) for name, c in code.VARIANTS.items()},
    outcomes=("wrote", "write_rejected", "lock_busy", "killed"),
    claims=CLAIMS,
    published={
        "buggy": PUBLISHED_DEL,
        "fixed": f"{PUBLISHED_CAD}; {PUBLISHED_FENCE}",
    },
    schema=schema,
    setup=code.setup,
    invariant=invariant,
    defaults=Defaults(n=3, actor_timeout_s=30, run_timeout_s=60),
    params={
        "pause_mode": Param(
            "sigstop",
            "sigstop: A in its own process, frozen by SIGSTOP until SIGCONT; "
            "sleep: A awaits in the lab's event loop",
            choices=choreography.PAUSE_MODES,
        ),
        "ttl_ms": Param(TTL_MS, "the lease: SET ... NX PX ttl_ms", min=1),
        "pause_ms": Param(PAUSE_MS, "A's stall, from taking the lease to waking up", min=0),
        "b_at_ms": Param(
            B_AT_MS,
            "when B tries (not before A's lease is gone in Redis, when b_at_ms >= ttl_ms)",
            min=0,
        ),
        "c_at_ms": Param(C_AT_MS, "when C tries (after A's release)", min=0),
        "b_work_ms": Param(B_WORK_MS, "B's work between its write and its release", min=0),
        "c_work_ms": Param(C_WORK_MS, "C's work between its write and its release", min=0),
    },
    uses=frozenset({"pg", "redis"}),
    # its claims are a pause against a TTL in real time, 100 ms apart: beside CPU-bound runs
    # on 2 cores the SIGCONT came late enough to turn DL-13 (seen on lanes, and under load)
    timed=("", "ttl-1000", "ttl-above-pause"),
    sources=("DL",),
    pinned=schedules.PINNED,
    observers=(choreography.WATCH,),
    quick=QUICK,
    cases={  # DL-13: a longer TTL with a still longer pause, and a TTL above this pause
        "ttl-1000": {
            "ttl_ms": 1000,
            "pause_ms": 1200,
            "b_at_ms": 1050,
            "c_at_ms": 1250,
            "b_work_ms": 1100,
        },
        # the published story with a TTL just above its pause (600 > 500), in both
        # profiles: quick's shorter clock would leave the pause at half the TTL
        "ttl-above-pause": {
            "ttl_ms": 600,
            "pause_ms": PAUSE_MS,
            "b_at_ms": B_AT_MS,
            "c_at_ms": C_AT_MS,
            "b_work_ms": B_WORK_MS,
        },
    },
)
