"""Write skew: two doctors each see a colleague on call and both go off call.

Symptom:    the rule "at least one doctor on call per shift" holds in every transaction's
            view, yet after two doctors ask to go off call at the same time nobody is on call.
Root cause: each transaction checks the invariant over several rows (count the doctors on
            call) and then updates a different row (its own). No row is written by both, so
            no row lock and no first-updater check sees a conflict: READ COMMITTED and
            REPEATABLE READ (snapshot isolation) both let the two commit.
Fix:        SERIALIZABLE (fixed-serializable): SSI sees the read-write dependency cycle and
            aborts one with 40001, to be retried. Or lock something both must lock: a
            representative row, the shift (fixed-lock-shift), or the checked rows themselves
            (fixed-for-update); the second then waits, re-reads and refuses.
Published:  "Nếu invariant trải trên nhiều row mà không có row nào để khoá (ví dụ "tổng ca
            trực mỗi ngày ≥ 1 bác sĩ"), cân nhắc SERIALIZABLE hoặc khoá một row đại diện."
            No numbers (PostgreSQL 17.11) — locking-concurrency-control.vi.txt, "Trade-offs".
See:        claim LC-31; lab/interleave.py. Steps, the same in every variant: each doctor
            begins (at the variant's isolation), takes the variant's lock, checks how many
            are on call, meets the other at `checked` (a doctor the server shows waiting on a
            lock counts as arrived), goes off call if another is on, commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Literal

import asyncpg

from lab.claims import Claim, Record, invariant_broken, invariants_hold
from lab.interleave import Rendezvous
from lab.outcome import notation
from lab.scenario import Check, Defaults, Env, Scenario

SHIFT = 1
DOCTORS = ("alice", "bob")
Isolation = Literal["read_committed", "repeatable_read", "serializable"]
RC: Isolation = "read_committed"
RR: Isolation = "repeatable_read"
SER: Isolation = "serializable"
INVARIANT = "at least one doctor on call"
CHECK = "SELECT name FROM doctors WHERE shift_id = $1 AND on_call"


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE shifts (id int PRIMARY KEY, day date NOT NULL)")
    await env.db.execute(
        "CREATE TABLE doctors (name text PRIMARY KEY,"
        " shift_id int NOT NULL REFERENCES shifts, on_call bool NOT NULL)"
    )
    await env.db.execute("INSERT INTO shifts VALUES ($1, '2026-12-01')", SHIFT)
    await env.db.executemany(
        "INSERT INTO doctors VALUES ($1, $2, true)", [(d, SHIFT) for d in DOCTORS]
    )


async def go_off_call(
    env: Env, conn: asyncpg.Connection, rv: Rendezvous, me: int, isolation: Isolation, lock: str
) -> str:
    """One doctor's request, the document's check-then-update."""
    name = DOCTORS[me]
    try:
        async with conn.transaction(isolation=isolation):
            if lock == "shift":  # step lock: the representative row
                await conn.execute("SELECT id FROM shifts WHERE id = $1 FOR UPDATE", SHIFT)
            # step check: who is on call (FOR UPDATE locks the rows it counts)
            on_call = await conn.fetch(CHECK + (" FOR UPDATE" if lock == "rows" else ""), SHIFT)
            env.trace(name, "checked", on_call=len(on_call))
            env.extra_evidence.setdefault("read", {})[name] = len(on_call)
            await rv.arrive(me, "checked")  # both have checked before either writes
            if len(on_call) < 2:
                return "refused"
            # step write: off call
            await conn.execute("UPDATE doctors SET on_call = false WHERE name = $1", name)
            env.trace(name, "off call")
        # step commit: leaving the block
    except asyncpg.SerializationError:
        env.trace(name, "40001")
        return "40001"
    return "ok"


def variant(isolation: Isolation, lock: str = "") -> Callable[[Env], Any]:
    async def run(env: Env) -> None:
        rv = Rendezvous(env.db, len(DOCTORS), ("checked",))
        conns = [await env.connect() for _ in DOCTORS]

        async def one(me: int) -> str:
            with rv.party(me, conns[me].get_server_pid()):
                return await go_off_call(env, conns[me], rv, me, isolation, lock)

        try:
            ends = await asyncio.gather(*(one(i) for i in range(len(DOCTORS))))
        finally:
            for c in conns:
                c.terminate()
        for word in ends:
            env.outcome(word)
        env.extra_evidence["doctors"] = {
            d: {"end": e, "waited": sorted(rv.waited[i]), "read": env.extra_evidence["read"][d]}
            for i, (d, e) in enumerate(zip(DOCTORS, ends, strict=True))
        }

    return run


async def invariant(env: Env) -> list[Check]:
    on_call = await env.db.fetchval(
        "SELECT count(*) FROM doctors WHERE shift_id = $1 AND on_call", SHIFT
    )
    return [Check(INVARIANT, on_call >= 1, f"{on_call} of {len(DOCTORS)} on call")]


# --- claims -------------------------------------------------------------------------------


def _ends(variant: str, expect: dict[str, int], waits: bool) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        docs = rec["evidence"]["doctors"]
        waited = [d for d, v in docs.items() if v["waited"]]
        reads = sorted(v["read"] for v in docs.values())
        if waits:  # the waiter read after the other's commit
            held = len(waited) == 1 and docs[waited[0]]["read"] == 1 and reads == [1, 2]
        else:
            held = not waited and reads == [2, 2]
        seen = ", ".join(f"{d} saw {v['read']} on call, {v['end']}" for d, v in docs.items())
        return held and rec["outcomes"] == expect, (
            f"{variant}: {seen}; seen waiting on a lock: {', '.join(waited) or 'nobody'}"
        )

    how = (
        "one waits for the other's lock, then sees 1 on call and refuses"
        if waits
        else "both see 2 on call before either writes"
    )
    return Claim("LC-31", f"{variant}: {how}: {notation(expect)}", (variant,), check)


PUBLISHED = "cân nhắc SERIALIZABLE hoặc khoá một row đại diện"
CLAIMS = (
    *(
        invariant_broken(
            "LC-31", v, INVARIANT, f"{v}: both go off call, nobody is on call", PUBLISHED
        )
        for v in ("buggy", "buggy-repeatable-read")
    ),
    _ends("buggy", {"ok": 2}, waits=False),
    _ends("buggy-repeatable-read", {"ok": 2}, waits=False),
    _ends("fixed-serializable", {"ok": 1, "40001": 1}, waits=False),
    _ends("fixed-lock-shift", {"ok": 1, "refused": 1}, waits=True),
    _ends("fixed-for-update", {"ok": 1, "refused": 1}, waits=True),
    *(
        invariants_hold("LC-31", v, f"{v}: someone stays on call", PUBLISHED)
        for v in ("fixed-serializable", "fixed-lock-shift", "fixed-for-update")
    ),
)

SCENARIO = Scenario(
    id="write-skew",
    doc=__doc__ or "",
    kind="script",
    variants={
        "buggy": variant(RC),
        "buggy-repeatable-read": variant(RR),
        "fixed-serializable": variant(SER),
        "fixed-lock-shift": variant(RC, "shift"),
        "fixed-for-update": variant(RC, "rows"),
    },
    outcomes=("ok", "refused", "40001"),
    claims=CLAIMS,
    published={"buggy": INVARIANT, "fixed-serializable": PUBLISHED},
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=1, run_timeout_s=60),
    script_connections=lambda n: len(DOCTORS),
    sources=("LC",),
)
