"""lock-order-prevention's invariant, checked after every run, load or pinned: money moved
once per committed transfer, no account in two transfers at once, no transfer frozen
(stopped by the lab's hard limit while it waited). DP-2 and DP-4 judge it on the loads of
fixed and fixed-trylock; the explore claims on every interleaving (DP-1: broken in some of
buggy's; DP-2, DP-4, DP-5: kept in all).
"""

from __future__ import annotations

from lab.core.scenario import Check, Env
from scenarios.lock_order_prevention import lock_order_prevention as code
from scenarios.lock_order_prevention.detector import state


async def invariant(env: Env) -> list[Check]:
    """Money moved once per committed transfer; no account in two transfers at once; no
    transfer frozen (stopped by the lab's hard limit while it waited)."""
    ids, moved = [f"account:{a}" for a in range(env.n + env.n % 2)], state(env).moved
    values = [int(v or -1) for v in await env.redis.mget([code.balance(env, a) for a in ids])]
    wrong = [
        f"{a} is {v}, expected {code.INITIAL_BALANCE + moved[a]}"
        for a, v in zip(ids, values, strict=True)
        if v != code.INITIAL_BALANCE + moved[a]
    ]
    commits, overlaps = env.counters["committed"], env.counters["overlaps"]
    stopped = env.outcomes.get("timeout", 0)
    detail = "; ".join(wrong) or f"{commits} commits"
    return [
        Check("balances moved once per commit", not wrong, detail),
        Check("one transfer per account at a time", overlaps == 0, f"{overlaps} overlaps"),
        Check("no transfer frozen", stopped == 0, f"{stopped} stopped by the lab's hard limit"),
    ]
