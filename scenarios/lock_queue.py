"""Lock queue: an ALTER TABLE waiting behind an idle transaction makes every new SELECT queue.

Symptom:    a migration starts and within seconds plain `SELECT`s on the table hang; the
            database is up, nothing errors, the pool fills with waiting requests.
Root cause: a session forgot to commit (idle in transaction) after `SELECT ... FOR
            UPDATE`. The ALTER TABLE needs ACCESS EXCLUSIVE, which conflicts with the idle
            session's lock, so it waits; lock queues are FIFO, so every new SELECT, whose
            ACCESS SHARE conflicts with the waiting ALTER, queues behind it.
Fix:        `SET lock_timeout` on the DDL: the ALTER gives up with 55P03 and nobody queues
            behind it (retry the migration later). Find the root with pg_blocking_pids():
            the session with an empty blocked_by; terminate it rather than its victims.
Published:  8123 | {}         | idle in transaction | 00:14:02 | SELECT * FROM orders WHERE id=42 FOR UPDATE
            8200 | {8123}     | active              | 00:03:10 | UPDATE orders SET status='paid' WHERE id=42
            8305 | {8123}     | active              | 00:00:41 | ALTER TABLE orders ADD COLUMN note text
            8400 | {8305}     | active              | 00:00:39 | SELECT * FROM orders WHERE id = 77
            "gốc là 8123 với blocked_by rỗng. SELECT pg_terminate_backend(8123) gỡ cả cây."
            (PostgreSQL 17.11) — locking-concurrency-control.vi.txt, "Tìm ai đang chặn ai"
See:        claims LC-9, LC-10. Steps, the same in both variants: the root locks order 42
            and goes idle; two sessions update orders 90 and 91 beside it (LC-9: DML does
            not conflict with DML) and commit; the updater waits on order 42; the ALTER
            starts (fixed: after SET lock_timeout = ddl_lock_timeout_ms); `readers_after_ms`
            later, or once the ALTER has ended, the readers start; each either finishes or
            is shown waiting; snapshot of the blocking tree; the queue stands `stuck_ms`;
            pg_terminate_backend(root); everyone left finishes. Measured on PostgreSQL 17
            the ALTER is blocked by the root *and* the waiting UPDATE (published: {8123}
            only): the UPDATE already holds ROW EXCLUSIVE on orders while it waits for the
            row. The root is the same either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from lab.aio import within
from lab.claims import Claim, Record, invariants_hold
from lab.errors import LabError, ScenarioFailure
from lab.evidence import blocking_tree
from lab.interleave import TIMEOUT_S, done_or_blocked
from lab.scenario import Check, Defaults, Env, Scenario

ROOT_SQL = "SELECT * FROM orders WHERE id=42 FOR UPDATE"
UPDATE_SQL = "UPDATE orders SET status='paid' WHERE id=42"
ALTER_SQL = "ALTER TABLE orders ADD COLUMN note text"
READ_SQL = "SELECT * FROM orders WHERE id = 77"
DML_SQL = "UPDATE orders SET status = 'packed' WHERE id = {id}"
DML_ROWS = (90, 91)
TIMEOUT_TEXT = "canceling statement due to lock timeout"
TIMER_SLACK_MS = 200.0  # a lock_timeout error arrives within this after the timeout
ROOT_LOCKS = """
SELECT pid, mode, granted FROM pg_locks
WHERE relation = 'orders'::regclass AND pid = ANY($1::int[]) ORDER BY pid, mode
"""


@dataclass
class Step:
    """One session's statement, run as a task; stamped when it ends."""

    who: str
    pid: int
    task: asyncio.Task[None]
    started_ms: float
    ended_ms: float | None = None
    blocked_by: list[int] | None = None  # who the server showed it waiting for, if it waited
    error: str = ""
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def outcome(self) -> str:
        return "55P03" if self.error else "queued" if self.blocked_by else "ok"


async def setup(env: Env) -> None:
    await env.db.execute("CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL)")
    await env.db.execute(
        "INSERT INTO orders SELECT i, 'new' FROM unnest($1::int[]) i", [42, 77, *DML_ROWS]
    )


async def buggy(env: Env) -> None:
    await _run(env, "")


async def fixed(env: Env) -> None:
    await _run(env, f"SET lock_timeout = '{int(env.params['ddl_lock_timeout_ms'])}ms'")


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["readers"] < 1 or p["stuck_ms"] < 0 or p["ddl_lock_timeout_ms"] < 1:
        raise LabError("-p readers must be >= 1, stuck_ms >= 0, ddl_lock_timeout_ms >= 1")
    if p["readers_after_ms"] < p["ddl_lock_timeout_ms"] + TIMER_SLACK_MS:
        raise LabError(
            f"-p readers_after_ms={p['readers_after_ms']}: must be at least ddl_lock_timeout_ms"
            f" + {TIMER_SLACK_MS:.0f}, so that in fixed the ALTER has given up when they come"
        )


async def _run(env: Env, ddl_setting: str) -> None:
    names = ["observer", "root", *(f"dml-{r}" for r in DML_ROWS), "updater", "alter"]
    names += [f"reader-{i}" for i in range(env.params["readers"])]
    conns = {name: await env.connect() for name in names}  # opened before anything starts
    try:
        await _choreography(env, ddl_setting, conns)
    except asyncpg.PostgresError as exc:
        raise ScenarioFailure(f"{env.scenario} / {env.variant}: {exc!r}") from exc
    finally:
        for c in conns.values():
            c.terminate()


async def _choreography(env: Env, ddl_setting: str, conns: dict[str, asyncpg.Connection]) -> None:
    ev = env.extra_evidence
    root = conns["root"]
    root_pid = root.get_server_pid()
    await root.execute("BEGIN")
    await root.execute(ROOT_SQL)
    env.trace("root", "locked order 42, idle in transaction", pid=root_pid)

    # LC-9: two DML transactions on the same table, beside each other and beside the root.
    dml = [conns[f"dml-{r}"] for r in DML_ROWS]
    for conn in dml:
        await conn.execute("BEGIN")
    steps = [
        _start(env, f"dml-{r}", c, DML_SQL.format(id=r)) for r, c in zip(DML_ROWS, dml, strict=True)
    ]
    for s in steps:
        await _settle(env, s)
    ev["dml_locks"] = [
        dict(r) for r in await env.db.fetch(ROOT_LOCKS, [root_pid, *(s.pid for s in steps)])
    ]
    ev["dml"] = [_summary(s) for s in steps]
    for conn in dml:
        await conn.execute("COMMIT")
    for s in steps:
        await s.task
        env.outcome(s.outcome)

    # LC-10: the updater and the ALTER wait for the root; then the readers arrive.
    updater = _start(env, "updater", conns["updater"], UPDATE_SQL)
    await _settle(env, updater)
    if ddl_setting:
        await conns["alter"].execute(ddl_setting)
    ddl = _start(env, "alter", conns["alter"], ALTER_SQL)
    await _settle(env, ddl)
    after = env.params["readers_after_ms"] - (env.now_ms() - ddl.started_ms)
    await asyncio.wait({ddl.task}, timeout=max(0.0, after / 1000))
    readers = [
        _start(env, f"reader-{i}", conns[f"reader-{i}"], READ_SQL)
        for i in range(env.params["readers"])
    ]
    await asyncio.gather(*(_settle(env, r) for r in readers))

    observer = conns["observer"]
    tree = await blocking_tree(observer, env.database)
    ev["blocking_tree"] = tree
    ev["roots"] = [{"pid": r["pid"], "state": r["state"]} for r in tree if not r["blocked_by"]]
    env.trace("lab", "blocking tree", rows=len(tree))
    await asyncio.sleep(env.params["stuck_ms"] / 1000)  # the queue stands
    terminated_at = env.now_ms()
    await observer.execute("SELECT pg_terminate_backend($1, $2)", root_pid, int(TIMEOUT_S * 1000))
    env.trace("lab", "pg_terminate_backend(root)", pid=root_pid)
    env.outcome("terminated")
    rest = [updater, ddl, *readers]
    await within(asyncio.gather(*(s.task for s in rest)), TIMEOUT_S)
    ev["blocking_tree_after"] = await blocking_tree(observer, env.database)
    for s in rest:
        env.outcome(s.outcome)
    ev["pids"] = {"root": root_pid, "updater": updater.pid, "alter": ddl.pid}
    ev["terminated_at_ms"] = round(terminated_at, 1)
    ev["sessions"] = [_summary(s) for s in rest]
    for r in readers:
        assert r.ended_ms is not None
        env.sample("reader_ms", r.ended_ms - r.started_ms)


def _start(env: Env, who: str, conn: asyncpg.Connection, sql: str) -> Step:
    async def run() -> None:
        try:
            await conn.execute(sql)
        except asyncpg.LockNotAvailableError as exc:  # 55P03: the only error a session expects
            step.error = str(exc)
        finally:
            step.ended_ms = env.now_ms()
            step.done.set()
            env.trace(who, "ended")

    step = Step(who, conn.get_server_pid(), asyncio.create_task(run()), env.now_ms())
    env.trace(who, "sent", sql=sql)
    return step


async def _settle(env: Env, step: Step) -> None:
    """Until `step` has ended or the server shows it waiting (then: for whom)."""
    step.blocked_by = await done_or_blocked(env.db, step.pid, step.done, what=step.who)
    if step.blocked_by:
        env.trace(step.who, "waiting", blocked_by=step.blocked_by)


def _summary(s: Step) -> dict[str, Any]:
    return {
        "who": s.who,
        "pid": s.pid,
        "blocked_by": s.blocked_by,
        "started_ms": round(s.started_ms, 1),
        "ended_ms": None if s.ended_ms is None else round(s.ended_ms, 1),
        "outcome": s.outcome if s.ended_ms is not None else None,
        "error": s.error,
    }


async def invariant(env: Env) -> list[Check]:
    status = await env.db.fetchval("SELECT status FROM orders WHERE id = 42")
    after = env.extra_evidence.get("blocking_tree_after")
    return [
        Check(
            "the updater's write landed once the root was gone",
            status == "paid",
            f"status {status}",
        ),
        Check("nothing waits on a lock once the root is gone", after == [], f"tree after: {after}"),
    ]


# --- claims -------------------------------------------------------------------------------


def _ev(rec: Record) -> dict[str, Any]:
    return dict(rec["evidence"])


def _readers(ev: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [s for s in ev.get("sessions", []) if s["who"].startswith("reader")]


def _ms(values: list[float]) -> str:
    return "/".join(f"{v:.0f}" for v in values) + " ms"


def _readers_queue(records: Mapping[str, Record]) -> tuple[bool, str]:
    ev = _ev(records["buggy"])
    alter, root, t_kill = ev["pids"]["alter"], ev["pids"]["root"], ev["terminated_at_ms"]
    readers = _readers(ev)
    ddl = next(s for s in ev["sessions"] if s["who"] == "alter")
    held = (
        bool(readers)
        and all(r["blocked_by"] == [alter] and r["ended_ms"] >= t_kill for r in readers)
        and root in (ddl["blocked_by"] or [])
    )
    waits = [r["ended_ms"] - r["started_ms"] for r in readers]
    return held, (
        f"buggy: {len(readers)} SELECTs blocked by [{alter}] (the ALTER), which was blocked by "
        f"{ddl['blocked_by']} (root {root}); they ran only after pg_terminate_backend(root), "
        f"after {_ms(waits)}"
    )


def _root_found(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        ev = _ev(records[variant])
        root, roots, tree = ev["pids"]["root"], ev["roots"], ev["blocking_tree"]
        held = [r["pid"] for r in roots] == [root] and roots[0]["state"] == "idle in transaction"
        rows = "; ".join(
            f"{r['pid']} {{{','.join(map(str, r['blocked_by']))}}} {r['state']} {r['query']}"
            for r in tree
        )
        return held, f"{variant}: {rows} (root: {root})"

    return Claim(
        "LC-10",
        f"{variant}: the only session with an empty blocked_by is the idle-in-transaction root",
        (variant,),
        check,
        published="gốc là 8123 với blocked_by rỗng",
    )


def _terminate_frees(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        ev = _ev(records[variant])
        t_kill, sessions = ev["terminated_at_ms"], ev["sessions"]
        freed = [s["who"] for s in sessions if s["ended_ms"] is not None and s["ended_ms"] > t_kill]
        ended = all(s["ended_ms"] is not None for s in sessions)
        held = ev["blocking_tree_after"] == [] and ended and bool(freed)
        return held, (
            f"{variant}: pg_terminate_backend(root) freed {', '.join(freed)}; "
            f"the tree after: {ev['blocking_tree_after']}"
        )

    return Claim(
        "LC-10",
        f"{variant}: terminating the root frees the whole tree",
        (variant,),
        check,
        published="SELECT pg_terminate_backend(8123) gỡ cả cây.",
    )


def _ddl_gives_up(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    ev, timeout = _ev(rec), rec["params"]["ddl_lock_timeout_ms"]
    ddl = next(s for s in ev["sessions"] if s["who"] == "alter")
    readers, t_kill = _readers(ev), ev["terminated_at_ms"]
    waited = ddl["ended_ms"] - ddl["started_ms"]
    held = (
        ddl["outcome"] == "55P03"
        and ddl["error"] == TIMEOUT_TEXT
        and waited >= timeout
        and bool(readers)
        and all(r["blocked_by"] is None and r["ended_ms"] < t_kill for r in readers)
    )
    return held, (
        f"fixed: ALTER {ddl['outcome']} ({ddl['error']}) after {waited:.0f} ms (lock_timeout "
        f"{timeout} ms); {len(readers)} SELECTs never waited, done in "
        f"{_ms([r['ended_ms'] - r['started_ms'] for r in readers])} with the root still open"
    )


def _dml_beside_dml(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        ev = _ev(records[variant])
        granted = {(r["pid"], r["mode"]) for r in ev["dml_locks"] if r["granted"]}
        pids = [d["pid"] for d in ev["dml"]]
        held = (
            all((p, "RowExclusiveLock") in granted for p in pids)
            and (ev["pids"]["root"], "RowShareLock") in granted  # the root's FOR UPDATE
            and all(d["blocked_by"] is None for d in ev["dml"])
        )
        modes = ", ".join(f"{p} {m}" for p, m in sorted(granted))
        return held, f"{variant}: granted on orders at once: {modes}; neither UPDATE waited"

    return Claim(
        "LC-9",
        f"{variant}: two UPDATEs of the same table (and the root's FOR UPDATE) hold their "
        "table locks at once",
        (variant,),
        check,
        published="DML thường (ROW EXCLUSIVE) không xung đột với nhau",
    )


PUBLISHED_TREE = (
    "8123 | {}         | idle in transaction | 00:14:02 | SELECT * FROM orders WHERE id=42 FOR UPDATE; "
    "8200 | {8123}     | active              | 00:03:10 | UPDATE orders SET status='paid' WHERE id=42; "
    "8305 | {8123}     | active              | 00:00:41 | ALTER TABLE orders ADD COLUMN note text; "
    "8400 | {8305}     | active              | 00:00:39 | SELECT * FROM orders WHERE id = 77"
)

VARIANTS = ("buggy", "fixed")
CLAIMS = (
    Claim(
        "LC-10",
        "buggy: every new SELECT queues behind the ALTER, which waits for the idle transaction",
        ("buggy",),
        _readers_queue,
        published=PUBLISHED_TREE,
    ),
    *(_root_found(v) for v in VARIANTS),
    *(_terminate_frees(v) for v in VARIANTS),
    Claim(
        "LC-10",
        "fixed: with lock_timeout the ALTER fails with 55P03 and the SELECTs never queue",
        ("fixed",),
        _ddl_gives_up,
        published="lock_timeout ... Áp dụng cho mọi loại lock, kể cả table lock của DDL.",
    ),
    *(_dml_beside_dml(v) for v in VARIANTS),
    *(
        invariants_hold("LC-10", v, f"{v}: the updater's write landed, nothing left waiting")
        for v in VARIANTS
    ),
)
SCENARIO = Scenario(
    id="lock-queue",
    validate=validate,
    doc=__doc__ or "",
    kind="script",
    variants={"buggy": buggy, "fixed": fixed},
    outcomes=("ok", "queued", "55P03", "terminated"),
    claims=CLAIMS,
    published={
        "buggy": PUBLISHED_TREE,
        "fixed": "SET lock_timeout: Áp dụng cho mọi loại lock, kể cả table lock của DDL.",
    },
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=1, run_timeout_s=60),
    params={"readers": 3, "ddl_lock_timeout_ms": 100, "readers_after_ms": 300, "stuck_ms": 100},
    param_help={
        "readers": "plain SELECTs that arrive while the ALTER waits",
        "ddl_lock_timeout_ms": "fixed: SET lock_timeout before the ALTER",
        "readers_after_ms": "readers arrive this long after the ALTER was sent, or once it ended",
        "stuck_ms": "how long the lab lets the queue stand before pg_terminate_backend(root)",
    },
    sources=("LC",),
)
