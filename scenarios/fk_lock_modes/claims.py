"""fk-lock-modes: what the documents claim, how each claim is judged, and the assembly.

Who waits for whom needs an order (s1 holds its lock while s2 asks): it is judged on
pinned schedules (`locklab explore fk-lock-modes`), where the server reports a session
blocked or not, and on every interleaving of the same steps: FOR UPDATE deadlocks in
some, FOR NO KEY UPDATE OF o in none. Under a load (`locklab run`) only what holds in any
order is judged: every committed request left its item.
"""

from __future__ import annotations

from dataclasses import replace

from lab.core.claims import Claim, invariants_hold, on_mutant
from lab.core.mutants import commits_partial
from lab.core.records import PinnedRunJson
from lab.core.scenario import Defaults, declare
from lab.core.steps import as_actor
from lab.pinned import (
    canonical,
    error_in,
    kept_in_all,
    nobody_waited,
    on_canonical,
)
from scenarios.fk_lock_modes import fk_lock_modes as code

BOTH = ("buggy", "fixed")
PARTIAL = "mutant-commits-partial"  # buggy, committing what went through before an error
MUTANT = commits_partial(code.item_then_pause)
PUBLISHED = {
    "buggy": "FOR UPDATE xung đột với FOR KEY SHARE, nên giờ mọi insert order_items cho "
    "order đó phải chờ.",
    "fixed": "UPDATE orders SET status = 'paid' WHERE id = 42 (lấy FOR NO KEY UPDATE) "
    "không chặn insert item",
}
LC13 = "SELECT ... FROM orders JOIN customers ... FOR UPDATE khoá row của cả hai."
LC15 = (
    "hai transaction cùng insert con cho cha A và B theo thứ tự ngược nhau, rồi cùng update "
    "cha, sẽ deadlock qua FOR KEY SHARE → FOR NO KEY UPDATE."
)


def one_deadlocks(cid: str, variant: str, schedule: str, text: str, published: str = "") -> Claim:
    """In `variant`'s canonical `schedule` both locks were shown blocked, exactly one
    session ended 40P01 and the other committed. Which one is the server's choice (the
    first waiter's, when the cycle closes well inside deadlock_timeout; at 100 ms on a busy
    machine either), so the claim does not name it."""

    def check(run: PinnedRunJson) -> tuple[bool, str]:
        ends = sorted(run["outcomes"].values())
        seen = f"{schedule}: {' '.join(ends)}; waited: {', '.join(run['waited']) or 'none'}"
        both = {"s1 lock", "s2 lock"} <= set(run["waited"])
        return both and ends in (["40P01", "ok"], ["40P01", "paid"]) and run["kept"], seen

    return on_canonical(cid, variant, schedule, text, check, published=published)


ENDS = {"s1": "paid", "s2": "ok"}
CLAIMS = (
    canonical(
        "LC-11",
        "buggy",
        "parent-locked",
        "buggy: while s1 holds SELECT ... FOR UPDATE on order 42, s2's child INSERT (FOR KEY "
        "SHARE) waits until s1 commits",
        outcomes=ENDS,
        waited=("s2 add-item",),
        kept=True,
        published=PUBLISHED["buggy"],
    ),
    nobody_waited(
        "LC-11",
        "fixed",
        "parent-locked",
        "fixed: FOR NO KEY UPDATE and the UPDATE of status do not block a child INSERT",
        ends=("paid", "ok"),
        published=PUBLISHED["fixed"],
    ),
    canonical(
        "LC-13",
        "buggy",
        "customer-locked",
        "buggy: FOR UPDATE on orders JOIN customers locks the customer's row too: s2's "
        "UPDATE of customer 7 waits",
        outcomes=ENDS,
        waited=("s2 rename",),
        kept=True,
        published=LC13,
    ),
    nobody_waited(
        "LC-13",
        "fixed",
        "customer-locked",
        "fixed: FOR ... OF o locks only orders; the customer's row stays free",
        ends=("paid", "ok"),
        published="Dùng FOR UPDATE OF orders để chỉ khoá table cần.",
    ),
    one_deadlocks(
        "LC-15",
        "buggy",
        "cross",
        "buggy: both requests added an item (KEY SHARE), then both lock the order FOR "
        "UPDATE: the server shows both waiting and fails one with 40P01, the other commits",
        published=LC15,
    ),
    error_in(
        "LC-15",
        "buggy",
        "40P01",
        "buggy: items added, then FOR UPDATE on the parent: some interleavings deadlock",
        expect=True,
        published=LC15,
    ),
    canonical(
        "LC-15",
        "fixed",
        "cross",
        "fixed: the same cross with FOR NO KEY UPDATE: s2 waits for s1's lock, both commit",
        outcomes=ENDS,
        waited=("s2 lock",),
        kept=True,
    ),
    error_in(
        "LC-15",
        "fixed",
        "40P01",
        "fixed: the same steps with FOR NO KEY UPDATE deadlock in no interleaving on "
        "PostgreSQL 17 (NO KEY UPDATE does not conflict with KEY SHARE)",
        expect=False,
    ),
    # Explored, its counterfactual is the same mutant's interleavings: in those where a
    # victim had added its item, the item stays.
    *(
        on_mutant(
            kept_in_all(
                "LC-11", v, f"{v}: every committed write landed once, in every interleaving"
            ),
            PARTIAL,
        )
        for v in BOTH
    ),
    # The invariant holds on every variant: a 40P01 rolls its victim back whole. Its
    # counterfactual is buggy (its item held 20 ms before its lock, so both requests cross in
    # every run) with that dropped: a victim's item committed, its request not.
    *(
        on_mutant(
            invariants_hold("LC-11", v, f"{v}: every committed write landed once under a load"),
            PARTIAL,
        )
        for v in BOTH
    ),
)

SCENARIO = declare(
    code,
    outcomes=("paid", "ok", "40P01"),
    mutants={PARTIAL: as_actor(MUTANT)},
    pinned=replace(code.PINNED, mutants={PARTIAL: (MUTANT, code.STEPS)}),
    claims=CLAIMS,
    published=PUBLISHED,
    defaults=Defaults(n=2, arrival="burst", deadlock_timeout_ms=1000, run_timeout_s=60),
    quick={"deadlock_timeout_ms": 100},  # each deadlocking interleaving costs one timeout
    sources=("LC",),
)
