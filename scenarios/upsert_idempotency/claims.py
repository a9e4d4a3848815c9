"""upsert-idempotency: what the documents claim, how each claim is judged, and the assembly.

The race needs an order (both requests look before either inserts), so the buggy answers
and the fix's are judged on the pinned schedule double-submit (`locklab trace
upsert-idempotency`), where the server reports the second request blocked on the first
one's uncommitted key, and on every interleaving of the same steps (`locklab explore
upsert-idempotency`). Under a load (`locklab run`) nothing forces the order, so only what
holds in any order is judged there: the fix charges once, counts every view, and its
gotchas (LC-19). After every run, pinned or load, the client retries the request with the
same body, then reuses the key for another body; the invariants check the answers.
The pinned checks are in double_submit.py; the probes after a run, the invariant and the
LC-19 gotchas judged on them, in probes.py.

buggy-merge's MERGE ... RETURNING needs PostgreSQL 17 (the document: "thêm RETURNING ở
PG 17"): on an older server the variant runs nothing and answers needs_pg17, and every
claim it feeds is "not judged: needs PostgreSQL 17", neither held nor failed by a syntax
error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.core.claims import Claim, Record, invariants_hold, repeated
from lab.core.scenario import Defaults, declare
from lab.core.steps import as_actor
from lab.errors import LabError
from lab.pinned import broke_in_some, kept_in_all
from scenarios.upsert_idempotency import double_submit, probes
from scenarios.upsert_idempotency import upsert_idempotency as code
from scenarios.upsert_idempotency.probes import VIEWS_COUNTED, invariant

KEY, NEEDS_17 = code.KEY, code.NEEDS_17


def validate(n: int, p: Mapping[str, Any]) -> None:
    if n < 2:
        raise LabError(f"-n {n}: the race needs at least 2 concurrent requests")


# --- claims on load records (what holds in any order) ----------------------------------


LOAD_TRIALS = 3  # whether buggy's racing requests collide is chance (20 of 20 runs did)


def _fixed_under_load(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    n, got = rec["knobs"]["n"], dict(rec["outcomes"])
    errors = {k: v for k, v in got.items() if k[:1].isdigit()}
    top = rec["samples"].get("views_returned", {}).get("max")
    owners = got.get("ok", 0)
    return not errors and owners == 1 and top == n and not rec["counters"].get("views_23505"), (
        f"fixed: {got}; counter upsert returned up to {top} of {n}"
    )


PUBLISHED = {
    "fixed": "Lần gọi đầu: key = chk_7f3a (1 row: ta sở hữu request này); Client retry: (0 rows)"
    " -- DO NOTHING không trả row cũ!; counter upsert RETURNING views: 42",
    "buggy": 'hai request cùng thấy "chưa có" và cùng insert, một bên dính duplicate key',
    "buggy-merge": "MERGE với insert đồng thời vẫn có thể lỗi unique violation",
}
LC21 = (
    "nếu done thì trả lại đúng response cũ, nếu in_progress thì trả 409 ..., nếu "
    "request_hash khác thì trả 422"
)
ERR = "ERROR 23505 duplicate key"
CLAIMS = (
    double_submit._double_submit(
        "LC-18",
        "buggy",
        "SELECT then INSERT: neither request sees the other's uncommitted key, the second "
        "insert waits on the first one's and fails with 23505",
        {"s1": "ok", "s2": "23505"},
        ("s2 claim",),
        (("s1 claim", "(no row); INSERT 0 1"), ("s2 claim", ERR)),
        (VIEWS_COUNTED,),
        PUBLISHED["buggy"],
    ),
    double_submit._double_submit(
        "LC-18",
        "buggy",
        "buggy: a page view fails with 23505 (the second counter insert waits, then fails)",
        {"s1": "ok", "s2": "23505"},
        ("s2 view",),
        (("s1 view", "views=1"), ("s2 view", ERR)),
        (VIEWS_COUNTED,),
    ),
    double_submit._double_submit(
        "LC-18",
        "fixed",
        "INSERT ... ON CONFLICT under the same race: no 23505; the waiter gets no row, and the "
        "counter's waiter updates the new row and gets 2",
        {"s1": "ok", "s2": "in_progress"},
        ("s2 claim", "s2 view"),
        (("s1 claim", f"key={KEY}"), ("s2 claim", "(no row)"), ("s2 view", "views=2")),
        (),
        PUBLISHED["fixed"],
    ),
    double_submit.needs_17(
        double_submit._double_submit(
            "LC-20",
            "buggy-merge",
            "MERGE under a concurrent insert waits, then fails with 23505, for the key and for "
            "the counter",
            {"s1": "ok", "s2": "23505"},
            ("s2 claim", "s2 view"),
            (("s1 claim", f"key={KEY}"), ("s2 claim", ERR), ("s2 view", ERR)),
            (VIEWS_COUNTED,),
            PUBLISHED["buggy-merge"],
        )
    ),
    double_submit._double_submit(
        "LC-21",
        "fixed",
        "Idempotency key: in_progress → 409, done → the stored response replayed, other hash → 422",
        {"s1": "ok", "s2": "in_progress"},
        ("s2 claim",),
        (("s2 answer", "status=in_progress"),),
        (),
        LC21,
    ),
    double_submit.needs_17(
        double_submit._step_error(
            "LC-20",
            "MERGE under a concurrent insert fails with a unique violation in some "
            "interleavings; ON CONFLICT in none",
            PUBLISHED["buggy-merge"],
        )
    ),
    kept_in_all(
        "LC-18",
        "fixed",
        "fixed keeps every invariant (one charge, every view counted, the retry replayed, the "
        "reused key refused) in every interleaving",
        counterfactual=None,  # buggy's interleavings lose a page view
    ),
    broke_in_some("LC-18", "buggy", "buggy loses a page view in some interleavings"),
    double_submit.needs_17(
        broke_in_some("LC-20", "buggy-merge", "buggy-merge loses a page view in some interleavings")
    ),
    # whether buggy's racing requests collide is chance: over LOAD_TRIALS runs, so its
    # counterfactual (buggy's runs) holds only if none of them collided
    repeated(
        Claim(
            "LC-18",
            "fixed under a load: no 23505, one request charges, the last counter upsert returns n",
            ("fixed",),
            _fixed_under_load,
            PUBLISHED["fixed"],
        ),
        LOAD_TRIALS,
    ),
    invariants_hold(
        "LC-18", "fixed", "fixed: one charge, every view counted (a load)", counterfactual=None
    ),
    # each gotcha is PostgreSQL's, whatever the variant: its counterfactual is a code mutant
    # whose statement does not give it (one claim each, so that each can be seen to fail)
    probes._gotcha(
        "DO NOTHING returns no row for the existing key",
        "RETURNING không trả row có sẵn khi DO NOTHING",
        probes._no_row,
        code.ROW_BACK,  # DO UPDATE ... RETURNING hands the existing key's row back
    ),
    probes._gotcha(
        "conflicts consume the sequence: the next new row's id leaves a gap",
        "sequence ... vẫn bị tiêu hao khi conflict",
        probes._id_gap,
        code.NO_CONFLICT,  # no INSERT tried for an existing row: no id drawn, no gap
    ),
    probes._gotcha(
        "one statement may not affect the same row twice (21000)",
        "ON CONFLICT DO UPDATE command cannot affect row a second time",
        probes._twice,
        code.GROUPED,  # the batch summed one row a key: no row hit twice, no 21000
    ),
)

SCENARIO = declare(
    code,  # its schema has no rows: every run starts from empty tables
    validate=validate,
    outcomes=("ok", "in_progress", "replayed", "key_reused", "23505", NEEDS_17),
    claims=CLAIMS,
    published=PUBLISHED,
    invariant=invariant,
    mutants={m: as_actor(code.variant(m)) for m in code.MUTANTS},
    # 20 submits of one key at once: buggy gave 19 of 20 23505 in each of 6 runs here, 3 of
    # them beside a busy core; a pair did not collide at all in one quick verify in 15
    defaults=Defaults(n=20, arrival="burst", actor_timeout_s=30, run_timeout_s=60),
    sources=("LC",),
)
