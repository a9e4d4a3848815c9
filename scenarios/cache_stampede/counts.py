"""cache-stampede DL-19, the counts: until the cache is filled the lock admits one rebuild
(fixed makes exactly one DB call), the buggy poll multiplies GETs where singleflight makes
one GET per request, and Redis's INFO commandstats agrees with the client's counts (plus
the GET and DEL inside the compare-and-delete EVAL). The first and the last are judged on
code mutants as their counterfactuals (cache_stampede.py's MUTANTS).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from lab.core.claims import NotReproduced, Record
from scenarios.cache_stampede.reading import _c, _failure_mode, _variants

NEAR = 0.30  # a published count or wall reproduced within ±30 % (single runs move 10-15 %)


def _one_rebuild(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    """Until the cache is filled the lock admits one rebuild. The document's code re-checks
    nothing after SET NX, so a waiter whose GET missed just before the write and whose SET NX
    came after the DEL rebuilds once more: counted apart as rebuilds_after_fill."""
    if any(_failure_mode(r) for _, r in _variants(records)):
        return None
    parts, ok = [], True
    for v, rec in _variants(records):
        calls, late = _c(rec, "db_calls"), _c(rec, "rebuilds_after_fill")
        ok = ok and calls - late == 1 and (v != "fixed" or calls == 1)
        raced = (
            f" ({late} after the cache was filled: GET missed before the write, SET NX after "
            "the DEL)"
        )
        parts.append(f"{v}: DB calls={calls}" + (raced if late else ""))
    return ok, "; ".join(parts)


def _poll_multiplies_gets(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    """Every buggy waiter makes the miss and at least one poll, at most one poll per poll
    interval of the rebuild plus the final hit; fixed makes one GET per request."""
    if any(_failure_mode(r) for _, r in _variants(records)):
        return None
    b, f = records["buggy"], records["fixed"]
    n, p = b["knobs"]["n"], b["params"]
    gb, gf = _c(b, "redis_get"), _c(f, "redis_get")
    floor, ceiling = 2 * n - 1, round(n * (2 + p["rebuild_ms"] / p["poll_ms"]))
    one_process = (f.get("load") or {}).get("procs", 1) == 1  # else a singleflight each
    plain = f["params"]["pods"] == 1 and not f["params"]["stale"] and one_process
    seen = (
        f"buggy: GETs={gb}, DB calls={_c(b, 'db_calls')}, {b['wall_ms']:.0f} ms; fixed: GETs={gf}, "
        f"DB calls={_c(f, 'db_calls')}, {f['wall_ms']:.0f} ms; {gb / max(gf, 1):.1f}x "
        f"(buggy bounds {floor}..{ceiling})"
    )
    return floor <= gb <= ceiling and (gf == f["knobs"]["n"] or not plain), seen


def _server_counts_agree(records: Mapping[str, Record]) -> tuple[bool, str]:
    """commandstats also counts the GET and DEL run inside the compare-and-delete EVAL."""
    parts, ok = [], True
    for v, rec in _variants(records):
        stats = rec["evidence"].get("redis_commandstats", {})
        evals, released = _c(rec, "redis_eval"), _c(rec, "lock_released")
        want = {
            "get": _c(rec, "redis_get") + evals,
            "set": _c(rec, "redis_set"),
            "del": _c(rec, "redis_del") + released,
            "eval": evals,
        }
        got = {k: int(stats.get(k, 0)) for k in want}
        ok = ok and got == want
        lab = {k: n for k, n in stats.items() if k not in want}
        inner = f" (incl. {evals} GET, {released} DEL inside EVAL)" if evals else ""
        counts = ", ".join(f"{k} {want[k]}/{got[k]}" for k in want if want[k] or got[k])
        parts.append(f"{v}: client/server {counts}{inner}; lab's own {lab}")
    return ok, "; ".join(parts)


def gets_near(published: int) -> Callable[[Mapping[str, Record]], tuple[bool, str] | None]:
    """buggy's GET count within NEAR of the document's `published`; outside it the number
    is not reproduced (NotReproduced, with the ratio)."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        rec = records["buggy"]
        if _failure_mode(rec):
            return None
        got = _c(rec, "redis_get")
        ratio = got / published
        seen = f"buggy: GETs={got} vs published {published} (x{ratio:.2f}, n={rec['knobs']['n']})"
        if abs(ratio - 1) > NEAR:
            raise NotReproduced(f"{seen}, outside ±{NEAR:.0%}")
        return True, seen

    return check


def twice_as_long(rec: Record) -> None:
    """A record edit: the run's wall twice as long (a rebuild the document did not time)."""
    rec["wall_ms"] = 2 * rec["wall_ms"]
