"""hot-row: what the documents claim, how each claim is judged, and the assembly.

The claim is about throughput, so it is judged on loads (`locklab run`): 40 buyers at
once, buggy's wall time against buyers × work_ms, fixed's units per second against
buggy's. Why they queue is judged pinned (`locklab explore hot-row`): the server shows
the second buyer's UPDATE blocked by the first one on one row, and not on two buckets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from lab.core.claims import Claim, Record, invariants_hold, on_mutant
from lab.core.scenario import Defaults, Param, declare
from lab.core.steps import as_actor
from lab.pinned import canonical, kept_in_all, nobody_waited
from scenarios.hot_row import hot_row as code

SPEEDUP = 2.0  # fixed must sell at least this many times as many units per second as buggy
BOTH = ("buggy", "fixed")
SERIAL = "mọi cách lock đều xếp hàng tuần tự trên row đó"
BUCKETS = (
    'chia stock thành nhiều row "bucket" (ví dụ 10 row mỗi row 100 chiếc, request chọn ngẫu nhiên)'
)


def _rate(rec: Record) -> float:
    return float(rec["outcomes"].get("ok", 0)) / max(float(rec["wall_ms"]), 1e-9) * 1000


def _line(rec: Record) -> str:
    lat = rec.get("latency_ms", {})
    return (
        f"{rec['variant']}: {rec['outcomes'].get('ok', 0)} sold in {rec['wall_ms']:.0f} ms = "
        f"{_rate(rec):.0f}/s, latency p50 {lat.get('p50', 0):.0f} ms p99 {lat.get('p99', 0):.0f} ms"
    )


def _serialised(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    floor = rec["outcomes"].get("ok", 0) * rec["params"]["work_ms"]
    return rec["wall_ms"] >= floor, f"{_line(rec)} (one at a time: >= {floor:.0f} ms)"


def _buckets_faster(records: Mapping[str, Record]) -> tuple[bool, str]:
    slow, fast = _rate(records["buggy"]), _rate(records["fixed"])
    return fast >= SPEEDUP * slow, (
        f"{_line(records['fixed'])}; {fast / max(slow, 1e-9):.1f}× buggy's {slow:.0f}/s"
    )


CLAIMS = (
    Claim(
        "LC-25",
        "buggy: buyers of one row run one at a time (wall >= buyers × work_ms)",
        ("buggy",),
        _serialised,
        published=SERIAL,
    ),
    Claim(
        "LC-25",
        f"fixed: bucket rows sell at least {SPEEDUP:.0f}× as many units per second",
        BOTH,
        _buckets_faster,
        published=BUCKETS,
    ),
    # Both variants keep it by the guarded UPDATE; its counterfactual drops the guard (fixed's
    # code at a sell-out, half as many units as buyers): a bucket goes below zero.
    *(
        on_mutant(
            invariants_hold("LC-25", v, f"{v}: units sold == ok, no bucket negative"),
            code.UNGUARDED,
        )
        for v in BOTH
    ),
    canonical(
        "LC-25",
        "buggy",
        "both-take",
        "buggy: the second buyer's UPDATE waits for the first one's commit on the one stock row",
        outcomes={"s1": "ok", "s2": "ok"},
        waited=("s2 take",),
        kept=True,
        published=SERIAL,
    ),
    nobody_waited(
        "LC-25",
        "fixed",
        "both-take",
        "fixed: two buyers on two random buckets do not wait for each other",
        ends=("ok",),
        published=BUCKETS,
    ),
    *(
        on_mutant(
            kept_in_all(
                "LC-25", v, f"{v}: units sold == ok, no bucket negative, in every interleaving"
            ),
            code.UNGUARDED,
        )
        for v in BOTH
    ),
)

SCENARIO = declare(
    code,
    validate=code.validate,
    outcomes=("ok", "sold_out"),
    claims=CLAIMS,
    published={
        "buggy": "mọi cách lock đều xếp hàng tuần tự trên row đó (no numbers published)",
        "fixed": "10 row mỗi row 100 chiếc, request chọn ngẫu nhiên (no numbers published)",
    },
    defaults=Defaults(n=40, arrival="burst", actor_timeout_s=60, run_timeout_s=120),
    params={
        "buckets": Param(
            10, "fixed: stock rows the units are split across (buggy: always 1)", min=1
        ),
        "stock": Param(code.STOCK, "units for sale, split evenly across the buckets"),
        "work_ms": Param(
            20.0, "other work inside the buyer's transaction while it holds its row", min=0
        ),
    },
    sources=("LC",),
    mutants={code.UNGUARDED: as_actor(code.unguarded)},
    pinned=replace(code.PINNED, mutants={code.UNGUARDED: (code.unguarded, code.STEPS)}),
)
