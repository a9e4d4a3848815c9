"""Workload knobs and outcome classification (no server needed)."""

from __future__ import annotations

import asyncio
import itertools

import asyncpg
import pytest

from lab.core.knobs import connections_needed, parse_arrival, parse_connect, start_offsets
from lab.core.outcome import classify, notation, ordered
from lab.errors import LabError
from lab.load.workload import hard_limit, percentiles


def test_burst_starts_everyone_at_zero() -> None:
    """burst: every actor is released at the same instant."""
    assert start_offsets("burst", 3, 1) == [0.0, 0.0, 0.0]


def test_stagger_spaces_actors_evenly() -> None:
    """stagger:5ms: actor i starts i × 5 ms after the clock."""
    assert start_offsets("stagger:5ms", 3, 1) == [0.0, 0.005, 0.01]
    assert start_offsets("stagger:10", 2, 1) == [0.0, 0.01]


def test_stagger_jitter_is_late_and_seeded() -> None:
    """stagger:5ms~1ms: each gap is 5 ms plus a seeded 0..1 ms, never early."""
    a = start_offsets("stagger:5ms~1ms", 100, 3)
    gaps = [b - a_ for a_, b in itertools.pairwise(a)]
    assert all(0.005 <= g <= 0.006 for g in gaps)
    assert len(set(gaps)) > 50
    assert a == start_offsets("stagger:5ms~1ms", 100, 3)


def test_poisson_is_seeded() -> None:
    """poisson:<rate>: the same seed gives the same arrivals, another seed others."""
    a = start_offsets("poisson:200", 50, 7)
    assert a == start_offsets("poisson:200", 50, 7)
    assert a != start_offsets("poisson:200", 50, 8)
    assert a == sorted(a)
    assert 0.1 < a[-1] < 0.5  # 49 gaps of mean 5 ms


@pytest.mark.parametrize(
    "spec", ["", "stagger", "stagger:-1", "stagger:5~x", "poisson:0", "wave:3"]
)
def test_bad_arrival(spec: str) -> None:
    """A malformed --arrival is a user error, not a crash."""
    with pytest.raises(LabError):
        parse_arrival(spec)


def test_connect_modes() -> None:
    """per-actor needs n connections, pool:<size> needs size."""
    assert parse_connect("pool:8") == ("pool", 8)
    assert connections_needed("per-actor", 200) == 200
    assert connections_needed("pool:8", 200) == 8
    for bad in ("pool:0", "pool", "shared"):
        with pytest.raises(LabError):
            parse_connect(bad)


def test_classify() -> None:
    """Database errors count by SQLSTATE, timeouts as "timeout", anything else is unexpected."""
    assert classify(asyncpg.exceptions.DeadlockDetectedError("x")) == "40P01"
    assert classify(asyncpg.exceptions.SerializationError("x")) == "40001"
    assert classify(TimeoutError()) == "timeout"
    assert classify(ValueError("x")) is None


def test_notation_is_the_documents() -> None:
    """Counts print as {"ok":4,"40P01":196}: ok first, then declared order, no spaces."""
    counts = ordered({"40P01": 196, "ok": 4}, ("ok", "40P01"))
    assert notation(counts) == '{"ok":4,"40P01":196}'
    assert notation(ordered({"40P01": 3}, ("ok", "40P01"))) == '{"40P01":3}'


async def test_hard_limit_ends_an_actor_that_swallows_one_cancellation() -> None:
    """A task that ignores the first cancel (as redis-py can, mid-command) still ends."""
    ended = asyncio.Event()

    async def stubborn() -> str:
        swallowed = False
        try:
            while True:
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    if swallowed:
                        raise
                    swallowed = True  # lose the first cancellation, keep polling
        finally:
            ended.set()

    with pytest.raises(TimeoutError):
        await hard_limit(stubborn(), 0.05)
    assert ended.is_set()


async def test_hard_limit_returns_the_result_in_time() -> None:
    """Within the limit, the coroutine's own result comes back."""

    async def quick() -> str:
        await asyncio.sleep(0)
        return "ok"

    assert await hard_limit(quick(), 1.0) == "ok"


def test_percentiles_are_nearest_rank_on_a_known_list() -> None:
    """Of 1..200 the p50 is the 100th value, p95 the 190th, p99 the 198th (nearest rank:
    the ceil(p * n / 100)-th), and each is a value of the list."""
    assert percentiles([float(v) for v in range(200, 0, -1)]) == {
        "min": 1.0,
        "p50": 100.0,
        "p95": 190.0,
        "p99": 198.0,
        "max": 200.0,
    }
    assert percentiles([3.0, 1.0, 2.0])["p50"] == 2.0
    assert percentiles([7.0]) == {"min": 7.0, "p50": 7.0, "p95": 7.0, "p99": 7.0, "max": 7.0}
    assert percentiles([]) == {}
