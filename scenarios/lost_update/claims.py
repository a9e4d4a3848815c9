"""lost-update: what the documents claim, how each claim is judged, and the assembly.

The buggy variant's oversell, and each fix's refusal, are judged on pinned schedules
(`locklab explore lost-update`): the canonical order the document describes, with the
server reporting the second buyer blocked, and every other interleaving of the same
steps. Under a load (`locklab run`) nothing forces the order, so only the claims that
hold under any order are judged there: the fixes never oversell.
"""

from __future__ import annotations

from dataclasses import replace

from lab.core.claims import at_isolation, invariants_hold, on_mutant
from lab.core.scenario import Defaults, Param, declare
from lab.core.steps import ISOLATION_LEVELS, as_actor
from lab.pinned import broke_in_some, canonical, kept_in_all, level_as
from scenarios.lost_update import lost_update as code

RC, RR = "read_committed", "repeatable_read"
FIXES = ("fixed", "fixed-for-update", "fixed-optimistic")
PUBLISHED = {
    "buggy": "Cả hai request đọc stock = 1, cả hai thấy đủ hàng, cả hai ghi stock = 0 và cả "
    "hai tạo order. Bạn vừa bán 2 chiếc khi chỉ có 1.",
    "fixed": "[ { status: 'fulfilled', value: 0 }, { status: 'rejected', reason: Error: "
    "OUT_OF_STOCK } ]",
    "fixed-for-update": "Transaction thứ hai gọi cùng accountId sẽ chờ ở câu SELECT ... FOR NO "
    "KEY UPDATE cho tới khi transaction đầu commit, rồi đọc số dư mới.",
    "fixed-optimistic": "Người thứ nhất lưu: UPDATE 1 (version 7 → 8); Người thứ hai lưu với "
    "version=7: UPDATE 0 → 409 Conflict",
}
LC8 = (
    "Ở REPEATABLE READ/SERIALIZABLE, thay vì đánh giá lại, transaction chờ bị lỗi could not "
    "serialize access due to concurrent update (40001)"
)


BOTH = "both-read-first"
# buggy's load kept the stock right in a run on a busy machine (2026-12-06): its oversell
# needs two buyers between read and write. The mutant makes sure of it: buggy's code with
# 20 ms between read and write, so both read before either writes, in every run.
OVERLAP = "mutant-read-pause-write"

CLAIMS = (
    canonical(
        "LC-4",
        "buggy",
        BOTH,
        "Read-compute-write at READ COMMITTED: both buyers read 1, the second writer waits "
        "on the first, then both buy the last unit",
        outcomes={"s1": "ok", "s2": "ok"},
        waited=("s2 write",),
        kept=False,
        published=PUBLISHED["buggy"],
    ),
    broke_in_some(
        "LC-4", "buggy", "buggy oversells in some interleavings of its steps at READ COMMITTED"
    ),
    canonical(
        "LC-5",
        "fixed",
        BOTH,
        "Guarded UPDATE: one buyer succeeds; the other waited on the row, re-evaluated "
        "WHERE, got rowcount 0",
        outcomes={"s1": "ok", "s2": "out_of_stock"},
        waited=("s2 write",),
        kept=True,
        published=PUBLISHED["fixed"],
    ),
    canonical(
        "LC-6",
        "fixed-for-update",
        BOTH,
        "FOR NO KEY UPDATE: the second buyer waits in its read, then reads stock 0",
        outcomes={"s1": "ok", "s2": "out_of_stock"},
        waited=("s2 read",),
        kept=True,
        published=PUBLISHED["fixed-for-update"],
    ),
    replace(
        canonical(
            "LC-7",
            "fixed-optimistic",
            BOTH,
            "Version column: the second save with the old version updates 0 rows (409)",
            outcomes={"s1": "ok", "s2": "conflict"},
            waited=("s2 write",),
            kept=True,
            published=PUBLISHED["fixed-optimistic"],
        ),
        unjudged=("under high contention most requests fail and retry",),
    ),
    replace(
        canonical(
            "LC-8",
            "fixed",
            BOTH,
            "At REPEATABLE READ the guarded UPDATE's waiter fails with 40001 instead of "
            "re-checking",
            outcomes={"s1": "ok", "s2": "40001"},
            waited=("s2 write",),
            kept=True,
            isolation=RR,
            published=LC8,
        ),
        # buggy fails with 40001 at RR too: the counterfactual is fixed at READ COMMITTED
        counterfactual=level_as("fixed", RR, RC),
    ),
    *(
        kept_in_all(
            "LC-4",
            v,
            f"{v} keeps every invariant in every interleaving at READ COMMITTED",
            counterfactual={v: "buggy"},
        )
        for v in FIXES
    ),
    *(
        on_mutant(
            at_isolation(
                invariants_hold(
                    "LC-4", v, f"{v}: no oversell under a load, every sale left the stock"
                ),
                RC,
            ),
            OVERLAP,
        )
        for v in FIXES
    ),
)

SCENARIO = declare(
    code,
    outcomes=("ok", "out_of_stock", "conflict", "40001"),
    claims=CLAIMS,
    published=PUBLISHED,
    defaults=Defaults(n=2, arrival="burst", actor_timeout_s=30, run_timeout_s=60),
    mutants={OVERLAP: as_actor(code.read_pause_write)},
    params={
        "stock": Param(1, "units of product 101 before the sale", min=0),
        "qty": Param(1, "units each buyer takes", min=1),
        "isolation": Param(
            RC, "transaction isolation: " + ", ".join(ISOLATION_LEVELS), choices=ISOLATION_LEVELS
        ),
    },
    cases={"repeatable-read": {"isolation": RR}},
    sources=("LC",),
)
