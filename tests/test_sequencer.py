"""lab/pinned/sequencer.py on a real server: steps granted in schedule order, the recorded trace.

Like trio's Sequencer tests, each test asserts the transcript the sequencer recorded:
what the server answered, and when it reported a session blocked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import asyncpg
import pytest

from lab.core.steps import Session, schedule, show_ids, show_sql
from lab.pinned.cast import InvalidPermutation, ScheduleError
from lab.pinned.interleave import InterleaveTimeout
from lab.pinned.permutations import count_interleavings, interleavings
from lab.pinned.rules import Rules
from lab.pinned.sequencer import Sequencer
from lab.servers import Servers
from tests.conftest import throwaway_database

# The deadlock test asserts s1 (the first waiter) is the victim: that holds only if s2's
# wait closes the cycle before s1's deadlock_timeout expires. 3 s, as for the golden
# transcripts (tests/test_pinned.py), leaves a loaded machine that margin; at 1 s it
# once flipped the victim there.
DEADLOCK_TIMEOUT = "3s"


@pytest.fixture
async def database(servers: Servers) -> AsyncIterator[str]:
    """Two rows to fight over (deadlock_timeout DEADLOCK_TIMEOUT); conftest's `db` and
    `sessions` open on it."""
    settings = {"deadlock_timeout": DEADLOCK_TIMEOUT}
    async with throwaway_database(servers, "locklab_seq", rows=2, settings=settings) as name:
        yield name


async def bump(s: Session) -> str:
    """Both sessions: one UPDATE of row 1, then COMMIT."""
    async with s.transaction():
        await s.execute("write", "UPDATE t SET v = v + 1 WHERE id = $1", 1)
    return "ok"


async def cross(s: Session) -> str:
    """s1 updates row 1 then 2, s2 row 2 then 1: the textbook deadlock."""
    first, second = (1, 2) if s.index == 0 else (2, 1)
    async with s.transaction():
        await s.execute("lock-1st", "UPDATE t SET v = v + 1 WHERE id = $1", first)
        await s.execute("lock-2nd", "UPDATE t SET v = v + 1 WHERE id = $1", second)
    return "ok"


def seq(db: asyncpg.Pool, sessions: list[asyncpg.Connection], code: object, **kw: Any) -> Sequencer:
    """s1 and s2 running `code`; keywords that are Rules' fields go into the Rules."""
    rules = {k: kw.pop(k) for k in list(kw) if k in Rules.__dataclass_fields__}
    if "ends_by_itself" in rules:
        rules["ends_by_itself"] = frozenset(rules["ends_by_itself"])
    return Sequencer(
        db,
        {"s1": (sessions[0], code), "s2": (sessions[1], code)},  # type: ignore[dict-item]
        label="test",
        header="schedule test",
        rules=Rules(**rules),
        **kw,
    )


async def test_a_blocked_step_waits_then_completes(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """s2's UPDATE waits on s1's row lock: <waiting ...>, then <... completed> after s1's COMMIT."""
    sq = seq(db, sessions, bump)
    outcomes = await sq.run(("s1 write", "s2 write", "s1 commit", "s2 commit"))
    assert outcomes == {"s1": "ok", "s2": "ok"}
    assert sq.transcript.text() == (
        "schedule test\n"
        "s1 write   UPDATE t SET v = v + 1 WHERE id = 1  -> UPDATE 1\n"
        "s2 write   UPDATE t SET v = v + 1 WHERE id = 1  <waiting ...>\n"
        "s1 commit  COMMIT                               -> COMMIT\n"
        "s2 write                                        <... completed> UPDATE 1\n"
        "s2 commit  COMMIT                               -> COMMIT\n"
        "s1                                              ends ok\n"
        "s2                                              ends ok\n"
    )
    assert sq.waited == ["s2 write"]
    assert await db.fetchval("SELECT v FROM t WHERE id = 1") == 2


async def test_a_step_for_a_blocked_session_is_an_invalid_permutation(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """Asking s2 for its commit while its UPDATE still waits on s1 is invalid, as in the
    isolation tester: InvalidPermutation names the item, nothing is left waiting."""
    sq = seq(db, sessions, bump)
    with pytest.raises(InvalidPermutation, match="s2 is still blocked in write") as info:
        await sq.run(("s1 write", "s2 write", "s2 commit", "s1 commit"))
    assert info.value.at == 2


async def test_wait_blocked_waits_for_the_step_and_overdue_may_cancel_it(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """With wait_blocked (the isolation tester since PostgreSQL 14), s2's commit waits for
    s2's blocked UPDATE instead of being invalid. Nothing releases it before s1's commit,
    so after `timeout` the sequencer calls `overdue`, which cancels it here; the watch is
    told of every item with the sessions settled."""
    told: list[tuple[object, ...]] = []
    late: list[tuple[list[str], int]] = []

    class Told:
        async def due(self, k: int, session: str) -> None:
            told.append(("due", k, session))

        async def granted(self, k: int, session: str) -> None:
            told.append(("granted", k, session, sq.states[session].blocked))

        async def ended(self) -> None:
            told.append(("ended",))

    async def overdue(states: Any, n: int) -> None:
        late.append(([st.session.name for st in states], n))
        await db.execute("SELECT pg_cancel_backend($1)", states[0].pid)

    sq = seq(db, sessions, bump, wait_blocked=True, overdue=overdue, watch=Told(), timeout=0.5)
    outcomes = await sq.run(("s1 write", "s2 write", "s2 commit", "s1 commit"))
    assert outcomes == {"s1": "ok", "s2": "57014"}
    assert late == [(["s2"], 1)]
    assert told == [
        ("due", 0, "s1"),
        ("granted", 0, "s1", False),
        ("due", 1, "s2"),
        ("granted", 1, "s2", True),  # settled: the server shows it blocked
        ("due", 2, "s2"),  # after its UPDATE was cancelled: its commit is skipped
        ("due", 3, "s1"),
        ("granted", 3, "s1", False),
        ("ended",),
    ]


async def holds_or_waits(s: Session) -> str:
    """s1 locks row 1 and ends with its transaction open; s2 writes row 1, then reads."""
    if s.index == 0:
        await s.execute("begin", "BEGIN")
        await s.execute("write", "UPDATE t SET v = v + 1 WHERE id = $1", 1)
        return "holds"
    await s.execute("write", "UPDATE t SET v = v + 1 WHERE id = $1", 1)
    await s.execute("read", "SELECT 1")
    return "ok"


@pytest.mark.parametrize("persist", [False, True])
async def test_a_session_that_persists_still_could_move(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection], persist: bool
) -> None:
    """s1 ended holding the lock s2 waits for. By default an ended session is gone, so s2
    is every live session blocked and only the server could move it (here it never does).
    With persist (an isolation spec's session keeps its transaction), s1 could still
    move, so s2's next step is an invalid permutation, as in the isolation tester."""
    sq = seq(db, sessions, holds_or_waits, persist=persist, resolve_timeout=0.3)
    run = sq.run(("s1 begin", "s1 write", "s2 write", "s2 read"))
    if persist:
        with pytest.raises(InvalidPermutation, match="s2 is still blocked in write") as info:
            await run
        assert info.value.at == 3
    else:
        with pytest.raises(InterleaveTimeout, match="at s2 read: every session blocked"):
            await run


async def test_every_session_blocked_waits_for_the_deadlock_detector(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """Both sessions blocked: the sequencer waits for the server; s1 waited first, so its
    check runs first and it is the victim; the DETAIL names sessions, not pids."""
    sq = seq(db, sessions, cross)
    outcomes = await sq.run(
        ("s1 lock-1st", "s2 lock-1st", "s1 lock-2nd", "s2 lock-2nd", "s1 commit", "s2 commit")
    )
    assert outcomes == {"s1": "40P01", "s2": "ok"}
    lines = sq.transcript.text().splitlines()
    assert lines[3].startswith("s1 lock-2nd") and lines[3].endswith("<waiting ...>")
    assert lines[4].startswith("s2 lock-2nd") and lines[4].endswith("<waiting ...>")
    assert lines[5].split()[2:] == ["<...", "completed>", "ERROR", "40P01", "deadlock", "detected"]
    assert lines[6].split()[:2] == ["DETAIL", "s1"]
    assert "blocked by s2" in lines[6] and "transaction X" in lines[6]
    assert "blocked by s1" in lines[7]
    assert lines[8].split() == ["s2", "lock-2nd", "<...", "completed>", "UPDATE", "1"]
    assert lines[9].split() == ["s1", "commit", "(skipped:", "s1", "ended:", "40P01)"]
    assert lines[-2].split() == ["s1", "ends", "40P01"]


async def test_a_session_that_returned_early_skips_its_steps(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """A session past a step (it returned before writing) has that step skipped; the
    transcript says where it went."""

    async def maybe(s: Session) -> str:
        async with s.transaction():
            v = await s.fetchval("read", "SELECT v FROM t WHERE id = $1", 1)
            if s.index == 1:
                return f"skipped at {v}"
            await s.execute("write", "UPDATE t SET v = 5 WHERE id = 1")
        return "ok"

    sq = seq(db, sessions, maybe)
    out = await sq.run(("s1 read", "s2 read", "s2 write", "s1 write", "s1 commit", "s2 commit"))
    assert out == {"s1": "ok", "s2": "skipped at 0"}
    lines = [x.split() for x in sq.transcript.text().splitlines()]
    assert ["s2", "write", "(skipped:", "s2", "went", "on", "to", "commit)"] in lines
    assert lines[1][-1] == lines[2][-1] == "v=0"  # both read before s1 wrote


async def test_a_step_that_neither_finishes_nor_blocks_times_out_loudly(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """A session stuck outside the server (not a lock wait) fails the run, naming the step."""
    never = asyncio.Event()

    async def stuck(s: Session) -> str:
        await s.step("hang", never.wait, shown="(waits forever)")
        return "ok"

    sq = seq(db, sessions, stuck, timeout=0.3)
    with pytest.raises(InterleaveTimeout, match=r"test, at s2 hang: s1 in hang neither"):
        await sq.run(("s1 hang", "s2 hang"))


async def test_a_step_the_schedule_does_not_have_fails(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """Code that asks for a step its schedule leaves out is a ScheduleError, not a hang."""
    sq = seq(db, sessions, bump)
    with pytest.raises(ScheduleError, match="s2 asked for step 'write' after"):
        await sq.run(("s1 write", "s1 commit"))


async def test_a_waiting_predicate_counts_as_blocked(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """A step outside PostgreSQL that declares it is waiting (a Redis poll) is blocked,
    so the schedule goes on to the step that releases it."""
    flag = asyncio.Event()

    async def poller(s: Session) -> str:
        if s.index == 0:

            async def is_waiting() -> bool:
                return not flag.is_set()

            await s.step("poll", flag.wait, shown="(poll)", waits=is_waiting)
        else:

            async def release() -> None:
                flag.set()

            await s.step("release", release, shown="(release)", result=lambda _: "set")
        return "ok"

    sq = seq(db, sessions, poller)
    assert await sq.run(("s1 poll", "s2 release")) == {"s1": "ok", "s2": "ok"}
    assert sq.transcript.text().splitlines()[1:4] == [
        "s1 poll     (poll)     <waiting ...>",
        "s2 release  (release)  -> set",
        "s1 poll                <... completed> True",
    ]


async def test_code_inside_one_step_sleeps_no_other_logic_when_pinned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A retried transaction run inside one granted step (Session.inside_step) has no gate
    of its own, but pinned its other_logic takes no time; in a load it sleeps."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr("lab.core.steps.asyncio.sleep", sleep)
    pinned = Session("s1", None, 0, gate=cast(Any, object())).inside_step()
    loaded = Session("s1", None, 0).inside_step()
    assert pinned.gate is None and pinned.pinned and not loaded.pinned
    await pinned.other_logic(0.05)
    await loaded.other_logic(0.03)
    assert slept == [0.03]


def test_interleavings_keep_each_session_order() -> None:
    """Two sessions of 3 steps merge 20 ways, each keeping its own order, no duplicates."""
    steps = {"s1": ("a", "b", "c"), "s2": ("a", "b", "c")}
    all_ = list(interleavings(steps))
    assert len(all_) == len(set(all_)) == count_interleavings(steps) == 20
    assert all_[0] == ("s1 a", "s1 b", "s1 c", "s2 a", "s2 b", "s2 c")
    for sched in all_:
        assert [x for x in sched if x.startswith("s1")] == ["s1 a", "s1 b", "s1 c"]


def test_a_schedule_reads_as_one_line() -> None:
    """schedule() splits a schedule as --schedule does: at commas, marks and blanks kept apart."""
    assert schedule("s1 read, s2 read,s1 commit ,s2 alter(*),") == (
        "s1 read",
        "s2 read",
        "s1 commit",
        "s2 alter(*)",
    )


def test_ids_are_shown_sorted_a_run_shortened() -> None:
    """Five consecutive ids print as the document's [1001, 1002, 1003 ... 1005]; others in full."""
    run = [{"id": i} for i in (1003, 1001, 1002, 1005, 1004)]
    assert show_ids(run) == "[1001, 1002, 1003 ... 1005]"
    assert show_ids([{"id": 9}, {"id": 7}]) == "[7, 9]"
    assert show_ids([]) == "[]"


def test_sql_is_shown_with_its_parameters() -> None:
    """$n parameters are written in as SQL literals, the statement on one line."""
    assert show_sql("UPDATE t\n   SET v = $1 WHERE k = $2 AND a = ANY($3)", [3, "A-1", ["x"]]) == (
        "UPDATE t SET v = 3 WHERE k = 'A-1' AND a = ANY('{x}')"
    )


async def test_load_mode_only_stamps(sessions: list[asyncpg.Connection]) -> None:
    """Without a sequencer a step calls asyncpg directly and stamps the time."""
    s = Session("s1", sessions[0], 0)
    assert await s.fetchval("read", "SELECT v FROM t WHERE id = $1", 2) == 0
    async with s.transaction():
        assert await s.execute("write", "UPDATE t SET v = 1 WHERE id = 2") == "UPDATE 1"
    assert [name for name, _ in s.stamps] == ["read", "write", "commit"]


async def test_every_session_blocked_by_an_outsider_fails_loudly(
    servers: Servers, database: str, db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """Both sessions wait on a lock a third connection holds: no cycle for the server to
    break, so the bounded wait ends in InterleaveTimeout naming the step, not a hang."""
    assert servers.pg is not None
    outsider = await asyncpg.connect(servers.pg.dsn, database=database)
    try:
        tx = outsider.transaction()
        await tx.start()
        await outsider.execute("SELECT * FROM t WHERE id = 1 FOR UPDATE")
        sq = seq(db, sessions, bump, resolve_timeout=0.3)
        with pytest.raises(InterleaveTimeout, match=r"at s1 commit: every session blocked"):
            await sq.run(("s1 write", "s2 write", "s1 commit", "s2 commit"))
    finally:
        outsider.terminate()


async def test_a_look_that_a_release_overtook_is_looked_at_again(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """s1 releases s2 while the sequencer is looking; the look answers "s2 waits" from
    before the release. That answer is stale: the sequencer looks again instead of
    taking s2 for blocked (it would then wait for a deadlock detector that never comes)."""
    flag, go, released, finish = (asyncio.Event() for _ in range(4))
    stale: list[bool] = []

    async def is_waiting() -> bool:
        if sq.states["s1"].running == "release" and not stale:
            stale.append(True)
            go.set()  # s1's release ends while this look is out
            await released.wait()
            return True  # an answer from before it
        if flag.is_set():
            finish.set()  # a fresh look: s2 goes on to its end
            return False
        return True

    async def code(s: Session) -> str:
        if s.index == 0:

            async def release() -> None:
                await go.wait()
                flag.set()

            await s.step("release", release, shown="(release)", result=lambda _: "set")
            released.set()
        else:

            async def poll() -> None:
                await flag.wait()
                await finish.wait()  # still in its step after the release, not blocked

            await s.step("poll", poll, shown="(poll)", waits=is_waiting)
            await s.step("after", asyncio.sleep, 0, shown="(after)")
        return "ok"

    sq = seq(db, sessions, code, resolve_timeout=0.3)
    assert await sq.run(("s2 poll", "s1 release", "s2 after")) == {"s1": "ok", "s2": "ok"}
    assert stale == [True]
    assert sq.waited == ["s2 poll"]


def timed_out(lock_timeout: str) -> object:
    """s1 updates row 1 and commits; s2 asks the same row with `lock_timeout`."""

    async def code(s: Session) -> str:
        if s.index == 0:
            return await bump(s)
        await s.execute("write", f"SET LOCAL lock_timeout = '{lock_timeout}'; {BUMP_1}")
        return "ok"

    return code


BUMP_1 = "UPDATE t SET v = v + 1 WHERE id = 1"


@pytest.mark.parametrize("lock_timeout", ["1ms", "300ms"])
async def test_a_step_marked_star_ends_by_itself_before_the_next_item(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection], lock_timeout: str
) -> None:
    """`s2 write(*)`: its lock_timeout fires while s1 still holds the row; the schedule waits
    for it without a grant and prints the same text whether the timeout fired before the
    server was seen reporting s2 blocked (1ms) or after (300ms)."""
    sq = seq(db, sessions, timed_out(lock_timeout))
    outcomes = await sq.run(("s1 write", "s2 write(*)", "s1 commit"))
    assert outcomes == {"s1": "ok", "s2": "55P03"}
    ask = f"SET LOCAL lock_timeout = '{lock_timeout}'; {BUMP_1}"
    lines = [x.split() for x in sq.transcript.text().replace(ask, "ASK").splitlines()]
    assert lines[2] == ["s2", "write", "ASK", "<waiting", "...>"]
    assert lines[3] == ["s2", "write", "<...", "completed>", "ERROR", "55P03", "canceling", "statement", "due", "to", "lock", "timeout"]  # fmt: skip
    assert lines[1:2] + lines[4:] == [
        ["s1", "write", *BUMP_1.split(), "->", "UPDATE", "1"],
        ["s1", "commit", "COMMIT", "->", "COMMIT"],
        ["s1", "ends", "ok"],
        ["s2", "ends", "55P03"],
    ]
    assert set(sq.waited) <= {"s2 write"}  # only what the server was seen reporting
    assert await db.fetchval("SELECT v FROM t WHERE id = 1") == 1


async def test_a_declared_step_that_blocks_ends_by_itself_before_the_next_item(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """`s2 write` declared to end by itself (Pinned.ends_by_itself), unmarked in the
    schedule: seen blocked, its lock_timeout fires before s1's commit is granted."""
    sq = seq(db, sessions, timed_out("50ms"), ends_by_itself={"s2 write"})
    assert await sq.run(("s1 write", "s2 write", "s1 commit")) == {"s1": "ok", "s2": "55P03"}
    lines = [x.split()[:4] for x in sq.transcript.text().splitlines()[1:4]]
    assert lines == [
        ["s1", "write", "UPDATE", "t"],
        ["s2", "write", "SET", "LOCAL"],
        ["s2", "write", "<...", "completed>"],
    ]
    assert sq.transcript.lines[1].result == "<waiting ...>"
    assert sq.waited == ["s2 write"]


async def test_a_declared_step_that_does_not_block_prints_its_result(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """A step declared to end by itself that the server never shows blocked prints its
    result on its own line, as any step, and the schedule goes on at once."""
    sq = seq(db, sessions, timed_out("50ms"), ends_by_itself={"s2 write"})
    assert await sq.run(("s1 write", "s1 commit", "s2 write")) == {"s1": "ok", "s2": "ok"}
    assert sq.transcript.lines[2].result == "-> UPDATE 1"
    assert sq.waited == []


async def test_a_marked_step_that_never_ends_fails_loudly(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """`s2 write(*)` without a timeout waits for s1 forever: past resolve_timeout the run
    fails naming the step, and nothing is left waiting."""
    sq = seq(db, sessions, bump, resolve_timeout=0.3)
    with pytest.raises(InterleaveTimeout, match=r"s2 write\(\*\): it did not end by itself"):
        await sq.run(("s1 write", "s2 write(*)", "s1 commit", "s2 commit"))
    assert await db.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted") == 0


async def test_waiters_released_inside_one_step_complete_in_it(
    servers: Servers, database: str, db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """s2's UPDATE waits for s1's row; s3's ALTER TABLE queues behind both. s1's COMMIT
    releases s2, whose own implicit COMMIT releases s3: both complete inside `s1 commit`,
    printed after its line in session order."""
    assert servers.pg is not None
    third = await asyncpg.connect(servers.pg.dsn, database=database)

    async def code(s: Session) -> str:
        if s.index == 0:
            return await bump(s)
        if s.index == 1:
            await s.execute("write", BUMP_1)  # its own implicit transaction
            return "ok"
        await s.execute("alter", "ALTER TABLE t ADD COLUMN note text")  # ACCESS EXCLUSIVE
        return "ok"

    try:
        sq = Sequencer(
            db,
            {
                name: (c, code)
                for name, c in zip(("s1", "s2", "s3"), [*sessions, third], strict=True)
            },
            label="test",
            header="schedule test",
        )
        outcomes = await sq.run(("s1 write", "s2 write", "s3 alter", "s1 commit"))
    finally:
        third.terminate()
    assert outcomes == {"s1": "ok", "s2": "ok", "s3": "ok"}
    assert sq.transcript.text() == (
        "schedule test\n"
        "s1 write   UPDATE t SET v = v + 1 WHERE id = 1  -> UPDATE 1\n"
        "s2 write   UPDATE t SET v = v + 1 WHERE id = 1  <waiting ...>\n"
        "s3 alter   ALTER TABLE t ADD COLUMN note text   <waiting ...>\n"
        "s1 commit  COMMIT                               -> COMMIT\n"
        "s2 write                                        <... completed> UPDATE 1\n"
        "s3 alter                                        <... completed> ALTER TABLE\n"
        "s1                                              ends ok\n"
        "s2                                              ends ok\n"
        "s3                                              ends ok\n"
    )
    assert sq.waited == ["s2 write", "s3 alter"]
    assert await db.fetchval("SELECT v FROM t WHERE id = 1") == 2


async def take(s: Session) -> str:
    """Both sessions: one decrement of row 1 that returns the new value, then COMMIT."""
    sql = "UPDATE t SET v = v - 1 WHERE id = $1 RETURNING v"
    async with s.transaction():
        await s.step("take", s.conn.fetchval, sql, 1, shown=show_sql(sql, (1,)))
    return "ok"


async def test_a_completed_result_keeps_its_sign(
    db: asyncpg.Pool, sessions: list[asyncpg.Connection]
) -> None:
    """A waiter's result that starts with '-' prints whole after <... completed>: the
    prefix '-> ' is removed, not every leading '-', '>' and ' ' (it printed `2` for -2)."""
    sq = seq(db, sessions, take)
    await sq.run(("s1 take", "s2 take", "s1 commit", "s2 commit"))
    lines = sq.transcript.text().splitlines()
    assert lines[1].endswith("-> -1"), lines
    assert lines[4].startswith("s2 take") and lines[4].endswith("<... completed> -2"), lines
