"""cache-stampede DL-20, the poll's GET rate: Redis's own GET count over the wait window
(the evidence wait_window.py leaves) against the demand, waiters x 1000/poll_ms. Held
within RATE_SHARE of the demand; below it because the client or Redis ran out of CPU, not
judged.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import NotJudged, Record
from scenarios.cache_stampede.reading import _failure_mode

RATE_SHARE = 0.2  # DL-20 holds when Redis's GET rate is within 20 % of the demand


def _get_rate(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    """DL-20 as a rate: Redis's own GET count over the wait window against the demand
    (waiters x 1000/poll_ms). Held within RATE_SHARE of the demand; below it because the
    lab (or Redis) ran out of CPU, not judged: the lab did not produce the document's load."""
    rec = records["buggy"]
    w = rec["evidence"].get("wait_window") or {}
    if not w or _failure_mode(rec):
        return None
    load = rec.get("load") or {}
    how = f"{load.get('procs', 1)} process(es), {load.get('redis_client', 'pooled')} client"
    ref = w.get("redis_benchmark") or {}
    against = (
        f"; redis-benchmark -c {ref['clients']} in this run: {ref['get_per_s']} GET/s "
        f"(lab/benchmark {w['get_per_s'] / max(ref['get_per_s'], 1):.2f})"
        if "get_per_s" in ref
        else (f"; {ref['error']}" if "error" in ref else "")
    )
    seen = (
        f"buggy n={rec['knobs']['n']}, rebuild {rec['params']['rebuild_ms']:.0f} ms: Redis counted "
        f"{w['get_per_s']} GET/s of {w['demand_get_per_s']} demanded over {w['ms']} ms "
        f"(a poll every {w['poll_cycle_ms']} ms per waiter, asked {rec['params']['poll_ms']:.0f}); "
        f"{how}; client CPU {w['client_cpu_per_s']:.2f} s/s, Redis CPU "
        f"{w['redis_cpu_per_s']:.2f} s/s; limit: {w['limit']}{against}"
    )
    share = w["get_per_s"] / max(w["demand_get_per_s"], 1)
    if 1 - RATE_SHARE <= share <= 1 + RATE_SHARE:
        return True, seen
    if share < 1 - RATE_SHARE and w["limit"].startswith("client CPU"):  # saturated, shown
        raise NotJudged(
            f"client-bound at {w['get_per_s']} GET/s of {w['demand_get_per_s']}: {seen}"
        )
    if share < 1 - RATE_SHARE and w["limit"] == "Redis CPU":
        raise NotJudged(f"Redis-bound at {w['get_per_s']} GET/s of {w['demand_get_per_s']}: {seen}")
    return False, seen
