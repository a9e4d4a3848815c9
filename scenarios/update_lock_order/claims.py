"""update-lock-order: what the documents claim, how each claim is judged, and the assembly.

Lock order is read from the server on pinned schedules (`locklab explore
update-lock-order`): in `serial` each session stops right after its first row lock and
the gate's FOR UPDATE SKIP LOCKED shows which row it has not locked yet; the rows each
statement returns are in the order it locked them. When both stop after their first row
lock (`cross`), the plans' opposite orders close a cycle the server breaks with 40P01
(buggy), or the second checkout waits for the first and both commit (fixed). Every
interleaving of the same steps is run too. Under a load (`locklab run`, no gate) only
what holds in any order is judged: stock moved once per commit, the fix never deadlocks.
"""

from __future__ import annotations

from dataclasses import replace

from lab.core.claims import all_ok, deadlocks, invariants_hold, on_mutant, repeated
from lab.core.mutants import commits_partial
from lab.core.records import PinnedRunJson
from lab.core.scenario import Defaults, declare
from lab.core.steps import as_actor
from lab.pinned import canonical, error_in, kept_in_all, on_canonical
from scenarios.update_lock_order import update_lock_order as code

BOTH = ("buggy", "fixed")
PARTIAL = "mutant-commits-partial"  # buggy row by row, committing what went through
ROW_BY_ROW = "mutant-row-by-row"  # buggy's two plan orders, one row a statement, 5 ms apart
LOAD_TRIALS = 3  # racing checkouts: whether buggy deadlocks is chance
PUBLISHED = {
    "buggy": "Thứ tự mà một câu UPDATE khoá row phụ thuộc vào plan (join order, index hay "
    "seq scan), nên không được đảm bảo.",
    "fixed": "SELECT ... ORDER BY ... FOR UPDATE thì khoá theo thứ tự row được trả về.",
}


def _result(run: PinnedRunJson, who: str) -> str:
    """The result of `who`'s step (its `<... completed>` line when it waited)."""
    lines = [x for x in run["transcript"].splitlines() if x.startswith(f"{who} ")]
    last = lines[-1] if lines else ""
    for mark in ("<... completed> ", "-> "):
        if mark in last:
            return last.rsplit(mark, 1)[1].strip()
    return ""


def _serial_reads(run: PinnedRunJson) -> dict[str, str]:
    return {
        w: _result(run, w) for w in ("gate open-s1", "s1 checkout", "gate open-s2", "s2 checkout")
    }


def _plan_dependent(run: PinnedRunJson) -> tuple[bool, str]:
    """buggy serial: s1 (seq-scan) stopped with 101 free and updated 202 first; s2 (index)
    stopped with 202 free and updated 101 first."""
    got = _serial_reads(run)
    want = {
        "gate open-s1": "free 101; open",
        "s1 checkout": "updated 202, 101",
        "gate open-s2": "free 202; open",
        "s2 checkout": "updated 101, 202",
    }
    seen = "; ".join(f"{k}: {v}" for k, v in got.items())
    return got == want and run["kept"], f"serial: {seen}"


def _returned_order(run: PinnedRunJson) -> tuple[bool, str]:
    """fixed serial: the locking SELECT returned (and so locked) 101 then 202 on both plans,
    and both rows were locked before the UPDATE reached the gate (nothing free)."""
    got = _serial_reads(run)
    held = all(got[f"gate open-s{k}"] == "free none; open" for k in (1, 2)) and all(
        got[f"s{k} checkout"].startswith("locked 101, 202; ") for k in (1, 2)
    )
    seen = "; ".join(f"{k}: {v}" for k, v in got.items())
    return held and run["kept"], f"serial: {seen}"


def _server_reports(run: PinnedRunJson) -> tuple[bool, str]:
    """A 40P01 whose DETAIL names each checkout waiting for the other's transaction."""
    text = run["transcript"]
    details = [x.split("DETAIL ", 1)[1] for x in text.splitlines() if "DETAIL " in x]
    cycle = {
        "s1 waits for ShareLock on transaction X; blocked by s2.",
        "s2 waits for ShareLock on transaction X; blocked by s1.",
    }
    held = "ERROR 40P01 deadlock detected" in text and cycle <= set(details)
    return held, f"cross: {'; '.join(details) or 'no deadlock DETAIL'}"


CLAIMS = (
    on_canonical(
        "LC-1",
        "buggy",
        "serial",
        "buggy: the same UPDATE ... FROM (VALUES sorted list) locks 101 first under one plan "
        "and 202 first under another",
        _plan_dependent,
        published=PUBLISHED["buggy"],
    ),
    canonical(
        "LC-1",
        "buggy",
        "cross",
        "buggy: two checkouts with the same sorted list, each stopped after its first row "
        "lock, deadlock when their plans differ: one 40P01, the other commits",
        # the first waiter (s1) is the victim when the cycle closes well inside
        # deadlock_timeout (the golden text, at 3 s); at 100 ms either may be
        outcomes=("40P01", "ok", "opened"),
        waited=("s1 checkout", "s2 checkout"),
        kept=True,
    ),
    on_canonical(
        "LC-1",
        "buggy",
        "cross",
        "buggy: the server reports the deadlock, each checkout waiting for the other",
        _server_reports,
    ),
    error_in(
        "LC-1",
        "buggy",
        "40P01",
        "buggy: some interleavings of the two plans' checkouts deadlock",
        expect=True,
    ),
    on_canonical(
        "LC-1",
        "fixed",
        "serial",
        "fixed: SELECT ... ORDER BY ... FOR NO KEY UPDATE returns, and so locks, 101 then 202 "
        "under both plans, and holds both before its UPDATE reaches the gate",
        _returned_order,
        published=PUBLISHED["fixed"],
    ),
    canonical(
        "LC-1",
        "fixed",
        "cross",
        "fixed: the same cross: s2's locking SELECT waits for s1, both checkouts succeed",
        outcomes={"s1": "ok", "s2": "ok", "gate": "opened"},
        waited=("s1 checkout", "s2 checkout"),
        kept=True,
    ),
    error_in("LC-1", "fixed", "40P01", "fixed: no interleaving deadlocks", expect=False),
    # Both keep it by their transactions: a 40P01 rolls its victim back whole. Its
    # counterfactual drops that (mutant-commits-partial explored: one row a step, in the
    # plans' orders; a victim commits its first row).
    *(
        on_mutant(
            kept_in_all(
                "LC-1",
                v,
                f"{v}: stock moved once per committed checkout, in every interleaving",
                counterfactual=None,
            ),
            PARTIAL,
        )
        for v in BOTH
    ),
    # Whether buggy's racing checkouts deadlock is chance: judged over LOAD_TRIALS runs. As
    # their counterfactual, buggy's runs held them in 1 of 3 trials of a verify (none
    # deadlocked that time): it is buggy's two plan orders one row a statement, 5 ms apart
    # (mutant-row-by-row), which deadlocks in every run.
    *(
        on_mutant(repeated(claim, LOAD_TRIALS), ROW_BY_ROW)
        for claim in (
            all_ok("LC-1", "fixed", "fixed: every checkout of a load succeeds"),
            deadlocks("LC-1", "fixed", "fixed: zero deadlocks under a load", expect=False),
        )
    ),
    # Both variants keep it by their transactions: a 40P01 rolls its victim back whole. Its
    # counterfactual drops that (buggy's plan orders, one row a statement, each checkout
    # committing what went through): a victim keeps its first row.
    *(
        on_mutant(
            invariants_hold(
                "LC-1", v, f"{v}: stock moved once per committed checkout under a load"
            ),
            PARTIAL,
        )
        for v in BOTH
    ),
)

SCENARIO = declare(
    code,
    validate=code.validate,
    outcomes=("ok", "40P01", "opened"),
    claims=CLAIMS,
    published={
        "buggy": "UPDATE ... FROM (VALUES ...): thứ tự khoá phụ thuộc vào plan",
        "fixed": "SELECT ... ORDER BY ... FOR UPDATE: khoá theo thứ tự row được trả về",
    },
    # 20 racing checkouts, 10 on each plan: buggy deadlocked in 5 of 5 runs here (12-15 of
    # 20); a pair raced past each other too often for the fix's load claims to be able to fail
    defaults=Defaults(n=20, arrival="burst", run_timeout_s=60),
    mutants={
        PARTIAL: as_actor(commits_partial(code.row_by_row)),
        ROW_BY_ROW: as_actor(code.row_by_row),
    },
    pinned=replace(
        code.PINNED, mutants={PARTIAL: (commits_partial(code.row_by_row), code.ROW_BY_ROW)}
    ),
    quick={"deadlock_timeout_ms": 100},  # each deadlocking interleaving costs one timeout
    sources=("LC",),
)
