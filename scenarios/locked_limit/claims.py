"""locked-limit: what the documents claim, how each claim is judged, and the assembly.

The reads must start while the writer holds its changes: that order is the schedule
writer-first (`locklab explore locked-limit`), where the server reports each reader
blocked or not; the other interleavings of the same steps show when the gotcha appears
at all (a reader that starts before the change, or after the commit, is in order).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.core.claims import Claim, Record
from lab.core.records import PinnedRunJson
from lab.core.scenario import Defaults, declare
from lab.pinned import on_canonical
from lab.pinned.claims import step_result
from scenarios.locked_limit import locked_limit as code

RC = "read_committed"
CANON = "writer-first"


def _rows(run: Mapping[str, Any], session: str) -> str:
    """The rows `session`'s read returned, as the transcript shows them."""
    return step_result(run, session, "read")


def reader(
    cid: str,
    variant: str,
    session: str,
    text: str,
    *,
    outcome: str,
    waited: bool,
    published: str = "",
) -> Claim:
    """In the canonical schedule, `session`'s read ended `outcome` and was shown blocked
    by the writer (`waited`) or answered at once."""
    form = code.FORMS[int(session[1:]) - 2]

    def check(run: PinnedRunJson) -> tuple[bool, str]:
        got, was = run["outcomes"].get(session), f"{session} read" in run["waited"]
        how = "waited" if was else "at once"
        seen = f"{session} {form} read {how}, {got}: {_rows(run, session)}"
        return got == outcome and was == waited, seen

    return on_canonical(cid, variant, CANON, text, check, published=published)


def in_some(
    cid: str,
    variant: str,
    session: str,
    outcomes: tuple[str, ...],
    text: str,
    *,
    expect: bool,
    published: str = "",
) -> Claim:
    """Some interleaving ends `session` with one of `outcomes` (expect=True), or none does."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        cell = records[variant]["by_isolation"].get(RC)
        if cell is None:
            return None
        marks = [f"{session}={o}" for o in outcomes]
        k = {m: sum(n for sig, n in cell["outcomes"].items() if m in sig.split()) for m in marks}
        seen = ", ".join(f"{m} in {n}/{cell['ran']}" for m, n in k.items()) + " interleavings"
        return cell["ran"] > 0 and (sum(k.values()) > 0) == expect, f"{variant}: {seen}"

    return Claim(cid, text, (variant,), check, published, explore=True, levels=(RC,))


ORDER = "kết quả có thể ... không đúng thứ tự, vì sắp xếp xảy ra trước khi khoá"
FEWER = "kết quả có thể ít hơn LIMIT ... row có thể bị bỏ qua sau khi đánh giá lại"
QUEUE = "Chấp nhận được với queue"
BAD = (code.OUT_OF_ORDER, code.SHORT)
CLAIMS = (
    reader(
        "LC-14",
        "buggy",
        "s2",
        "buggy: ORDER BY ... LIMIT ... FOR UPDATE behind a concurrent update returns the rows "
        "in the order they had before it",
        outcome=code.OUT_OF_ORDER,
        waited=True,
        published=ORDER,
    ),
    reader(
        "LC-14",
        "buggy",
        "s3",
        "buggy: a locking read can return fewer rows than its LIMIT when a picked row is "
        "dropped on re-evaluation",
        outcome=code.SHORT,
        waited=True,
        published=FEWER,
    ),
    *(
        reader(
            "LC-14",
            "fixed",
            s,
            f"fixed: FOR UPDATE SKIP LOCKED in the {form} form returns a full batch, in order, "
            "without waiting",
            outcome=code.IN_ORDER,
            waited=False,
            published=QUEUE,
        )
        for s, form in (("s2", "top"), ("s3", "subquery"))
    ),
    in_some(
        "LC-14",
        "buggy",
        "s2",
        (code.OUT_OF_ORDER,),
        "buggy: some interleavings return the top form out of order",
        expect=True,
        published=ORDER,
    ),
    in_some(
        "LC-14",
        "buggy",
        "s3",
        (code.SHORT,),
        "buggy: some interleavings return the subquery form short",
        expect=True,
        published=FEWER,
    ),
    # on buggy the top form goes out of order (never short), the subquery short: name both
    *(
        in_some(
            "LC-14",
            "fixed",
            s,
            BAD,
            f"fixed: no interleaving returns the {form} read out of order or short",
            expect=False,
            published=QUEUE,
        )
        for s, form in (("s2", "top"), ("s3", "subquery"))
    ),
)

SCENARIO = declare(
    code,
    outcomes=(code.IN_ORDER, code.OUT_OF_ORDER, code.SHORT, code.WROTE),
    claims=CLAIMS,
    published={
        "buggy": "FOR UPDATE với LIMIT và ORDER BY: kết quả có thể ít hơn LIMIT hoặc không đúng "
        "thứ tự",
        "fixed": "FOR UPDATE SKIP LOCKED: chấp nhận được với queue",
    },
    defaults=Defaults(n=3, arrival="burst", run_timeout_s=60),  # one writer, two readers
    sources=("LC",),
)
