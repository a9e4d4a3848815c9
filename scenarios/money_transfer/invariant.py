"""money-transfer's invariant, checked after every run, load or pinned: the total balance
stays TOTAL, no balance goes negative, the balances moved once per committed transfer, no
request moved money twice and, for fixed, one ledger row (idempotency key) per commit. The
balances and the ledger's row count are kept as evidence; LC-2 reads the verdict of
MOVED_ONCE.
"""

from __future__ import annotations

from lab.core.scenario import Check, Env
from scenarios.money_transfer import money_transfer as code
from scenarios.money_transfer.money_transfer import TOTAL

MOVED_ONCE = "balances moved once per committed transfer"


async def invariant(env: Env) -> list[Check]:
    """Money is conserved, never negative, moved once per commit, never twice per request."""
    bal = {r["id"]: r["balance"] for r in await env.db.fetch("SELECT id, balance FROM accounts")}
    ledger = await env.db.fetchval("SELECT count(*) FROM transfers")
    env.extra_evidence.update(
        balances={str(a): b for a, b in sorted(bal.items())}, ledger_rows=ledger
    )
    c12, c21 = env.counters["committed_1_to_2"], env.counters["committed_2_to_1"]
    expected = code.INITIAL_BALANCE - env.params["amount"] * (c12 - c21)
    requests = len({code.transfer_of(env, a)[0] for a in range(env.n)})
    return [
        Check(
            f"total balance stays {TOTAL}", sum(bal.values()) == TOTAL, f"total {sum(bal.values())}"
        ),
        Check("no negative balance", min(bal.values()) >= 0, f"lowest {min(bal.values())}"),
        Check(
            MOVED_ONCE,
            bal[1] == expected,
            f"account 1: {bal[1]}, expected {expected} ({c12} commits 1→2, {c21} commits 2→1)",
        ),
        Check(
            "no request moved money twice",
            c12 + c21 <= requests,
            f"{c12 + c21} commits for {requests} distinct requests",
        ),
        *(
            [
                Check(
                    "one ledger row (idempotency key) per commit",
                    ledger == c12 + c21,
                    f"{ledger} rows in transfers, {c12 + c21} commits",
                )
            ]
            if env.variant == "fixed"
            else []
        ),
    ]
