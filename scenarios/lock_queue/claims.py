"""lock-queue: what the documents claim, how each claim is judged, and the assembly.

The claims are about one order of nine sessions (the root locks, the ALTER waits, the
readers come), so they are judged on each variant's canonical schedule `queue`, run by
`locklab explore lock-queue` (canonical schedules only: the other orders of nine sessions
are millions, and say nothing the document does): the blocking tree and the locks the
dba session read, the steps the server showed blocked, and where each session's answer
came in the transcript (before or after pg_terminate_backend). `locklab run` runs the
same schedule, timed, and judges the invariants.

The counterfactuals are code mutants (lock_queue.py MUTANTS, each with its own canonical
schedule): dml1 and dml2 taking a table lock that conflicts with itself (LC-9), the dba
cancelling the root where it terminated it (LC-10). The one-root claims keep a record edit:
PostgreSQL's wait tree has one root in every variant, and no honest change of the code
gives it a second one without changing what the claim is about.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from lab.core.claims import Claim, Mutation, Record, invariants_hold, mutation, on_mutant
from lab.core.records import PinnedRunJson
from lab.core.scenario import Defaults, Env, Param, declare
from lab.pinned import RC, on_canonical
from lab.pinned.scripted import scripted
from scenarios.lock_queue import lock_queue as code

SCHEDULE = "queue"
TIMEOUT_TEXT = "canceling statement due to lock timeout"
READERS = tuple(s for s in code.SESSIONS if code.STEPS[s] == ("read",))
PUBLISHED_TREE = (
    "8123 | {}         | idle in transaction | 00:14:02 | "
    "SELECT * FROM orders WHERE id=42 FOR UPDATE; "
    "8200 | {8123}     | active              | 00:03:10 | "
    "UPDATE orders SET status='paid' WHERE id=42; "
    "8305 | {8123}     | active              | 00:00:41 | ALTER TABLE orders ADD COLUMN note text; "
    "8400 | {8305}     | active              | 00:00:39 | SELECT * FROM orders WHERE id = 77"
)
Run = PinnedRunJson  # a canonical run: outcomes, waited, kept, transcript, evidence


def _at(run: Run, who: str) -> int:
    """Index of the transcript line of `who`'s last step (its <... completed> if it waited)."""
    step = code.STEPS[who][-1]
    lines = run["transcript"].splitlines()
    return max((i for i, x in enumerate(lines) if x.startswith(f"{who} {step} ")), default=-1)


def _kill(run: Run) -> int:
    """Index of the line of the dba's pg_terminate_backend (a large one when it is missing:
    nothing then counts as having come after it)."""
    lines = run["transcript"].splitlines()
    return next((i for i, x in enumerate(lines) if x.startswith("dba terminate ")), len(lines))


def _tree(run: Run) -> dict[str, dict[str, Any]]:
    return {r["who"]: r for r in run["evidence"].get("tree", [])}


def _on_queue(variant: str, change: Callable[[Run], None], why: str) -> Mutation:
    """A counterfactual: `variant`'s canonical run with `change` made to it (a copy)."""

    def edit(rec: Record) -> None:
        change(rec["by_isolation"][RC]["canonical"][SCHEDULE])

    return mutation(variant, edit, why)


def _claim(
    variant: str,
    text: str,
    check: Callable[[Run], tuple[bool, str]],
    published: str,
    counterfactual: Mutation | None = None,
) -> Claim:
    """LC-10 judged by `check` on `variant`'s canonical schedule."""
    claim = on_canonical("LC-10", variant, SCHEDULE, text, check, published=published)
    return replace(claim, counterfactual=counterfactual)


def _readers_queue(run: Run) -> tuple[bool, str]:
    tree, kill = _tree(run), _kill(run)
    ddl = tree.get("ddl", {}).get("blocked_by", [])
    queued = all(
        tree.get(r, {}).get("blocked_by") == ["ddl"]
        and f"{r} read" in run["waited"]
        and _at(run, r) > kill
        for r in READERS
    )
    held = queued and "root" in ddl
    return held, (
        f"{len(READERS)} SELECTs blocked by "
        f"{sorted({','.join(tree.get(r, {}).get('blocked_by', [])) for r in READERS})} (the "
        f"ALTER), which was blocked by {ddl}; they completed only after pg_terminate_backend(root)"
    )


def _root_found(run: Run) -> tuple[bool, str]:
    tree = _tree(run)
    roots = [r for r in tree.values() if not r["blocked_by"]]
    held = [r["who"] for r in roots] == ["root"] and roots[0]["state"] == "idle in transaction"
    rows = "; ".join(
        f"{r['who']} {{{','.join(r['blocked_by'])}}} {r['state']} {r['query']}"
        for r in tree.values()
    )
    return held, rows


def _second_root(run: Run) -> None:
    """A tree with a second session blocked by nobody: the updater's blocked_by emptied."""
    for row in run["evidence"].get("tree", []):
        if row["who"] == "upd":
            row["blocked_by"] = []


def _terminate_frees(run: Run) -> tuple[bool, str]:
    ev, kill = run["evidence"], _kill(run)
    freed = [s for s in code.SESSIONS if s not in ("dba", "root") and _at(run, s) > kill]
    killed = ev.get("terminate") == [{"who": "root", "terminated": True}]
    ended, after = len(run["outcomes"]) == len(code.SESSIONS), ev.get("after")
    held = killed and after == [] and bool(freed) and ended
    # what the dba's call did, as its result column says (a mutant cancels: "cancelled")
    did = [f"{k} {r['who']}" for r in ev.get("terminate", []) for k, v in r.items() if v is True]
    left = "no second look" if after is None else ", ".join(r["who"] for r in after) or "nobody"
    return held, (
        f"the dba {', '.join(did) or 'ended nobody'}; {', '.join(freed) or 'nobody'} ended "
        f"after it; in the tree after: {left}"
    )


def _ddl_gives_up(run: Run) -> tuple[bool, str]:
    kill, lines = _kill(run), run["transcript"].splitlines()
    answer = lines[_at(run, "ddl")]
    early = all(0 <= _at(run, r) < kill and f"{r} read" not in run["waited"] for r in READERS)
    timed_out = run["outcomes"]["ddl"] == "55P03" and TIMEOUT_TEXT in answer
    held = timed_out and run["kept"] and early and not set(READERS) & set(_tree(run))
    got = answer.split("ERROR", 1)[-1].strip()
    return held, (
        f"ALTER {run['outcomes']['ddl']} ({got}), no sooner than lock_timeout (invariants "
        f"{'held' if run['kept'] else 'BROKEN'}); {len(READERS)} SELECTs never waited, done "
        "before pg_terminate_backend(root)"
    )


def _dml_beside_dml(variant: str) -> Claim:
    def check(run: Run) -> tuple[bool, str]:
        granted = {(r["who"], r["mode"]) for r in run["evidence"].get("locks", []) if r["granted"]}
        want = {
            ("dml1", "RowExclusiveLock"),
            ("dml2", "RowExclusiveLock"),
            ("root", "RowShareLock"),
        }
        waited = sorted({"dml1 update", "dml2 update"} & set(run["waited"]))
        held = want <= granted and not waited
        modes = ", ".join(f"{w} {m}" for w, m in sorted(granted))
        return held, f"granted on orders at once: {modes}; waited: {', '.join(waited) or 'neither'}"

    claim = on_canonical(
        "LC-9",
        variant,
        SCHEDULE,
        f"{variant}: two UPDATEs of the same table (and the root's FOR UPDATE) hold their "
        "table locks at once",
        check,
        published="DML thường (ROW EXCLUSIVE) không xung đột với nhau",
    )
    # ROW EXCLUSIVE never conflicts with itself: the counterfactual runs the same UPDATEs,
    # each after a LOCK TABLE in a mode that does (dml2 waits for dml1's commit)
    return on_mutant(claim, code.LOCK_TABLE_MUTANTS[variant])


VARIANTS = ("buggy", "fixed")
CLAIMS = (
    _claim(
        "buggy",
        "buggy: every new SELECT queues behind the ALTER, which waits for the idle transaction",
        _readers_queue,
        PUBLISHED_TREE,
    ),
    *(
        _claim(
            v,
            f"{v}: the only session with an empty blocked_by is the idle-in-transaction root",
            _root_found,
            "gốc là 8123 với blocked_by rỗng",
            # both variants have one root: the counterfactual is a tree with a second one
            _on_queue(v, _second_root, "PostgreSQL's wait tree has one root in every variant"),
        )
        for v in VARIANTS
    ),
    # Both variants free their tree: the counterfactual cancels the root where they
    # terminate it (an idle transaction runs no statement to cancel: the tree stays)
    *(
        on_mutant(
            _claim(
                v,
                f"{v}: terminating the root frees the whole tree",
                _terminate_frees,
                "SELECT pg_terminate_backend(8123) gỡ cả cây.",
            ),
            code.CANCEL_MUTANTS[v],
        )
        for v in VARIANTS
    ),
    _claim(
        "fixed",
        "fixed: with lock_timeout the ALTER fails with 55P03 and the SELECTs never queue",
        _ddl_gives_up,
        "lock_timeout ... Áp dụng cho mọi loại lock, kể cả table lock của DDL.",
    ),
    *(_dml_beside_dml(v) for v in VARIANTS),
    # the same mutant: the dba's second look still finds the updater waiting on the root
    # (its write lands later, at the root's own commit: the check that breaks is the tree's)
    *(
        on_mutant(
            invariants_hold(
                "LC-10",
                v,
                f"{v}: the updater's write landed, nothing left waiting",
                counterfactual=None,
            ),
            code.CANCEL_MUTANTS[v],
        )
        for v in VARIANTS
    ),
)
PUBLISHED: Mapping[str, str] = {
    "buggy": PUBLISHED_TREE,
    "fixed": "SET lock_timeout: Áp dụng cho mọi loại lock, kể cả table lock của DDL.",
}


def _mutant_runs() -> dict[str, Callable[[Env], Awaitable[None]]]:
    """The code mutants as script variants, as `scripted` makes the variants: each runs its
    canonical schedule `queue` (a counterfactual's `locklab run`, judged by the invariants)."""
    pinned = code.PINNED
    as_variants = replace(
        pinned,
        code={name: c for name, (c, _) in pinned.mutants.items()},
        steps={name: steps for name, (_, steps) in pinned.mutants.items()},
        schedules=pinned.mutant_schedules,
    )
    return scripted(as_variants, SCHEDULE)


SCENARIO = declare(
    code,
    kind="script",  # the run is the canonical schedule: the subject is one order
    variants=scripted(code.PINNED, SCHEDULE),
    outcomes=("ok", "55P03", "idle"),
    claims=CLAIMS,
    published=dict(PUBLISHED),
    defaults=Defaults(n=1, run_timeout_s=60),
    params={  # at least 1: 0 is PostgreSQL's "wait forever", no fix at all
        "ddl_lock_timeout_ms": Param(100, "fixed: SET LOCAL lock_timeout before the ALTER", min=1),
    },
    sources=("LC",),
    mutants=_mutant_runs(),
)
