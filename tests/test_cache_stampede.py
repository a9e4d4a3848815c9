"""cache-stampede on real Redis: the poll storm, one rebuild, and the failure modes of DL-21."""

from __future__ import annotations

from lab.core.records import Record
from scenarios.cache_stampede import SCENARIO
from scenarios.cache_stampede.wait_window import SAMPLE_S
from tests.conftest import RunFn

N = 20  # small enough that the event loop is not saturated: every waiter polls on time
REBUILD_MS = 400.0
POLL_MS = 50.0
POLLS_PER_WAITER = REBUILD_MS / POLL_MS  # 8 polls while the rebuild runs


def claims(records: dict[str, Record]) -> dict[str, list[bool]]:
    """Claim id -> verdicts over the run's records, each claim once."""
    seen: dict[tuple[str, str], bool] = {}
    for rec in records.values():
        for c in rec["claims"]:
            seen[(c["id"], c["text"])] = c["held"]
    out: dict[str, list[bool]] = {}
    for (cid, _), held in seen.items():
        out.setdefault(cid, []).append(held)
    return out


async def test_polling_multiplies_gets_not_db_calls(run_scenario: RunFn) -> None:
    """20 misses: one rebuild before the fill in both; buggy makes ~1 + 8 GETs per request."""
    records = await run_scenario(SCENARIO, n=N)
    b, f = records["buggy"]["counters"], records["fixed"]["counters"]
    assert b["db_calls"] - b.get("rebuilds_after_fill", 0) == 1
    assert f["db_calls"] == 1
    assert f["redis_get"] == N  # one GET per request: the miss
    waiters = N - 1
    assert waiters * POLLS_PER_WAITER / 2 <= b["polls"] <= waiters * (POLLS_PER_WAITER + 1)
    assert b["redis_get"] >= N + waiters * POLLS_PER_WAITER / 2
    assert records["buggy"]["outcomes"] == records["fixed"]["outcomes"] == {"ok": N}
    verdicts = claims(records)
    assert "DL-21" not in verdicts  # DL-21's failure modes are off: not judged
    assert verdicts["DL-19"] and all(verdicts["DL-19"]), verdicts


async def test_commandstats_match_client_counts(run_scenario: RunFn) -> None:
    """The server counts the client's commands, plus EVAL's inner GET/DEL and the lab's own:
    the commandstats snapshot's INFO and the wait window's samples (INFO + PTTL each)."""
    records = await run_scenario(SCENARIO, n=N)
    for rec in records.values():
        stats, c = rec["evidence"]["redis_commandstats"], rec["counters"]
        assert stats["get"] == c["redis_get"] + c.get("redis_eval", 0)
        assert stats["set"] == c["redis_set"]
        own = {k: v for k, v in stats.items() if k not in ("get", "set", "del", "eval")}
        assert set(own) == {"info", "pttl"} and own["info"] == own["pttl"] + 1, own
        assert own["pttl"] >= REBUILD_MS / 1000 / SAMPLE_S / 2  # sampled through the rebuild
    fixed = records["fixed"]["evidence"]["redis_commandstats"]
    assert fixed["eval"] == 1 and fixed["del"] == 1  # the compare-and-delete's DEL


async def test_quick_profile_over_100_connections(run_scenario: RunFn) -> None:
    """200 requests (past redis-py's default 100-connection pool): every quick claim holds."""
    records = await run_scenario(SCENARIO, **SCENARIO.quick)
    assert all(r["outcomes"] == {"ok": 200} for r in records.values()), [
        (r["outcomes"], r["wall_ms"], r["latency_ms"]) for r in records.values()
    ]
    verdicts = [c for r in records.values() for c in r["claims"]]
    failed = [c for c in verdicts if not c["held"] and "quick" in c["profiles"]]
    assert verdicts and not failed, failed
    window = records["buggy"]["evidence"]["wait_window"]
    assert window["demand_get_per_s"] == 199 * 1000 / POLL_MS
    assert (
        abs(window["get_per_s"] - window["gets"] / window["ms"] * 1000) <= 1 + window["gets"] / 1000
    )
    assert window["client_cpu_per_s"] > window["redis_cpu_per_s"]


async def test_throwing_rebuild_buggy_waits_out_the_lock(run_scenario: RunFn) -> None:
    """DL-21 no finally: buggy waiters wait the 1.5 s lock out; fixed releases it at once."""
    params = {"rebuild_fails": True, "rebuild_ms": 200.0, "lock_ttl_s": 1.5}
    records = await run_scenario(SCENARIO, n=N, params=params)
    b, f = records["buggy"], records["fixed"]
    assert b["outcomes"] == {"ok": N - 1, "error": 1}
    assert b["evidence"]["lock_pttl_after_failure_ms"] > 1000  # still held after the throw
    assert b["latency_ms_by_outcome"]["ok"]["min"] >= 1500
    assert f["outcomes"] == {"error": N}  # no stale copy: fail fast, no TTL wait
    assert f["evidence"]["lock_pttl_after_failure_ms"] == -2  # released in finally
    assert f["latency_ms"]["max"] < 1000
    assert claims(records)["DL-21"] == [True, True]  # no finally, and no bound on the poll


async def test_rebuild_slower_than_lock_ttl(run_scenario: RunFn) -> None:
    """DL-21 no token: the lock expires mid-rebuild, a second rebuild starts, DEL hits its lock."""
    # The second holder takes the lock at 500 ms, keeps it until 1000 ms, and the first
    # one's DEL comes at 700 ms: 200-300 ms of margin on either side for a loaded machine.
    params = {"rebuild_ms": 700.0, "lock_ttl_s": 0.5, "max_polls": 20}
    records = await run_scenario(SCENARIO, n=N, params=params)
    b, f = records["buggy"], records["fixed"]
    assert b["counters"]["db_calls"] >= 2
    assert b["counters"].get("lock_deleted_foreign", 0) >= 1
    assert [i["held"] for i in b["invariants"]] == [False]  # two rebuilds at once
    assert f["counters"]["db_calls"] == 1
    assert f["counters"].get("lock_expired_before_release") == 1  # compare-and-delete: no DEL
    assert [i["held"] for i in f["invariants"]] == [True]
    assert f["outcomes"] == {"ok": N}
    assert claims(records)["DL-21"] == [True]


async def test_stale_copy_answers_waiters_at_once(run_scenario: RunFn) -> None:
    """DL-21 stale fallback: fixed waiters answer from the stale copy, buggy ones poll."""
    records = await run_scenario(SCENARIO, n=N, params={"stale": True})
    b, f = records["buggy"], records["fixed"]
    assert f["outcomes"] == {"ok": 1, "stale": N - 1}
    assert f["latency_ms_by_outcome"]["stale"]["max"] < REBUILD_MS / 2
    assert b["outcomes"] == {"ok": N}
    assert b["latency_ms"]["min"] >= REBUILD_MS
    assert claims(records)["DL-21"] == [True]


async def test_second_pod_waits_bounded_on_the_lock(run_scenario: RunFn) -> None:
    """Two pods: one rebuild in all; the other pod's leader polls the value a bounded time."""
    params = {"pods": 2}
    rec = (await run_scenario(SCENARIO, ["fixed"], n=N, params=params))["fixed"]
    c = rec["counters"]
    assert c["db_calls"] == 1
    assert c["lock_attempts"] == 2  # one singleflight per pod
    assert 1 <= c["polls"] <= SCENARIO.params["max_polls"]
    assert c["redis_get"] == N + c["polls"]
    assert rec["outcomes"] == {"ok": N}


async def test_a_pooled_client_is_named_the_limit(run_scenario: RunFn) -> None:
    """1,000 waiters, 1 s rebuild on redis-py's pooled client in one process: the poll
    demand is not met and the client's CPU is why."""
    params = {"rebuild_ms": 1000.0}
    records = await run_scenario(
        SCENARIO, ["buggy"], n=1000, params=params, redis_client="pooled", procs=1
    )
    rec = records["buggy"]
    window = rec["evidence"]["wait_window"]
    assert window["demand_get_per_s"] == 999 * 1000 / POLL_MS
    assert window["get_per_s"] < window["demand_get_per_s"]
    assert window["limit"].startswith("client")
    assert rec["counters"]["db_calls"] - rec["counters"].get("rebuilds_after_fill", 0) == 1


def _rate_record(get_per_s: int, limit: str, demand: int = 99_980) -> Record:
    window = {
        "ms": 1000.0, "gets": get_per_s, "get_per_s": get_per_s, "demand_get_per_s": demand,
        "poll_cycle_ms": 50.0, "client_cpu_per_s": 1.0, "redis_cpu_per_s": 0.1, "limit": limit,
    }  # fmt: skip
    params = {**SCENARIO.params, "rebuild_ms": 1000.0}
    return {"knobs": {"n": 5000}, "params": params, "evidence": {"wait_window": window}}


def test_dl20_is_judged_as_a_rate() -> None:
    """DL-20 holds within 20 % of the demand; below it, a client-bound run is not judged
    (never held) and a run whose client had room is not held; far above it is not held."""
    claim = next(c for c in SCENARIO.claims if c.id == "DL-20" and "published" in c.profiles)
    held = claim.judge({"buggy": _rate_record(90_000, "none: the poll interval sets the rate")})
    assert held is not None and held["held"] and not held.get("not_judged")
    bound = claim.judge({"buggy": _rate_record(20_000, "client CPU: the event loop")})
    assert bound is not None and bound["not_judged"] and not bound["held"]
    assert bound["measured"].startswith("client-bound at 20000 GET/s of 99980")
    unclear = claim.judge({"buggy": _rate_record(20_000, "unclear")})
    assert unclear is not None and not unclear["held"] and not unclear.get("not_judged")
    above = claim.judge({"buggy": _rate_record(150_000, "none: the poll interval sets the rate")})
    assert above is not None and not above["held"]


async def test_sharded_pipelined_stampede_adds_up(run_scenario: RunFn) -> None:
    """40 waiters over 2 worker processes, auto-pipelined: every request ends once, the
    client's GET count is the one Redis saw, and the record names the load it ran with."""
    n = 40
    records = await run_scenario(
        SCENARIO, ["buggy"], n=n, procs=2, redis_client="pipelined", params={"rebuild_ms": 300.0}
    )
    rec = records["buggy"]
    assert rec["outcomes"] == {"ok": n}
    assert rec["load"]["procs"] == 2 and rec["load"]["redis_client"] == "pipelined"
    assert sorted(w["actors"] for w in rec["load"]["workers"]) == [n // 2, n // 2]
    assert rec["evidence"]["redis_commandstats"]["get"] == rec["counters"]["redis_get"]
    assert rec["counters"]["db_calls"] - rec["counters"].get("rebuilds_after_fill", 0) == 1
    window = rec["evidence"]["wait_window"]  # the lab's samples line up with the workers' trace
    assert window["client_procs"] == 2 and window["samples"] >= 2
    assert window["ms"] <= window["window_ms"] and window["window_ms"] >= 300


def test_the_published_get_count_is_held_near_it_or_not_reproduced() -> None:
    """DL-19's 2,739 GETs: 2,900 is within ±30 % (held); this machine's 4,492 reads NOT
    REPRODUCED with the ratio, never not held."""
    from lab.core.claims import Claim
    from scenarios.cache_stampede import counts

    claim = Claim("DL-19", "gets", ("buggy",), counts.gets_near(2739))

    def rec(gets: int) -> Record:
        """A buggy record at the published size with `gets` GETs."""
        params = {"rebuild_fails": False, "rebuild_ms": 400, "lock_ttl_s": 10}
        return {"knobs": {"n": 500}, "params": params, "counters": {"redis_get": gets}}

    assert (claim.judge({"buggy": rec(2900)}) or {})["status"] == "held"
    far = claim.judge({"buggy": rec(4492)})
    assert far is not None and far["status"] == "not reproduced" and "x1.64" in far["measured"]
