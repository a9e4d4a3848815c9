"""Lock queue: an ALTER TABLE waiting behind an idle transaction makes every new SELECT queue.

Symptom:    a migration starts and within seconds plain `SELECT`s on the table hang; the
            database is up, nothing errors, the pool fills with waiting requests.
Root cause: a request forgot to commit (idle in transaction) after `SELECT ... FOR UPDATE`.
            The ALTER needs ACCESS EXCLUSIVE, which conflicts with that lock, so it waits;
            lock queues are FIFO: every new SELECT (ACCESS SHARE) queues behind the ALTER.
Fix:        `SET lock_timeout` on the DDL (fixed): the ALTER gives up with 55P03, nobody
            queues behind it (retry the migration later). pg_blocking_pids() finds the root,
            the session with an empty blocked_by: terminate it, not its victims.
Published:  the tree "8123 | {} | idle in transaction | ... FOR UPDATE", the ALTER {8123}, a
            SELECT {8305}: "gốc là 8123 với blocked_by rỗng. SELECT pg_terminate_backend(8123)
            gỡ cả cây." (PostgreSQL 17.11) — locking-concurrency-control.vi.txt, in claims.py.
See:        claims LC-9, LC-10 in claims.py; expected/ has the transcripts. root locks order
            42, never commits; dml1, dml2 update orders 90, 91 beside it (LC-9) and commit;
            upd waits for order 42; then the ALTER; r1..r3 read order 77; dba reads the tree,
            terminates the session blocked by nobody, reads it again. On PostgreSQL 17 the
            ALTER waits for the root *and* the waiting UPDATE (published: {8123} only).
            The code mutants at the end are the claims' counterfactuals, never a variant.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import asyncpg

from lab.core.scenario import Check, Env, executes
from lab.core.steps import Pinned, Session, schedule

schema = executes("CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL)")
ROOT_SQL = "SELECT * FROM orders WHERE id=42 FOR UPDATE"
UPDATE_SQL = "UPDATE orders SET status='paid' WHERE id=42"
ALTER_SQL = "ALTER TABLE orders ADD COLUMN note text"  # DDL: the next reset remakes orders
READ_SQL = "SELECT * FROM orders WHERE id = 77"
DML_SQL = "UPDATE orders SET status = 'packed' WHERE id = $1"
DML_ROWS = (90, 91)
# what the dba sees; a session's name is the last part of its application_name
SEEN = """SELECT pid, regexp_replace(application_name, '^.*/', '') AS who, state, query,
  query_start, pg_blocking_pids(pid) AS by FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()"""
TREE = f"""WITH s AS ({SEEN})
SELECT pid, who, ARRAY(SELECT b.who FROM s b WHERE b.pid = ANY (s.by) ORDER BY 1) AS blocked_by,
  state, query FROM s WHERE cardinality(by) > 0 OR pid IN (SELECT unnest(by) FROM s)
ORDER BY query_start"""  # in the order they came, as the published tree


def _to_root(call: str) -> str:
    """`call` on the root: the session that blocks others and waits for nobody."""
    return f"SELECT who, {call} FROM ({TREE}) tree WHERE cardinality(blocked_by) = 0"


TERMINATE = _to_root("pg_terminate_backend(pid, 5000) AS terminated")
LOCKS = f"""SELECT s.who, l.mode, l.granted FROM pg_locks l JOIN ({SEEN}) s USING (pid)
WHERE l.relation = 'orders'::regclass ORDER BY 1, 2"""


async def setup(env: Env) -> None:
    await env.db.execute("INSERT INTO orders SELECT unnest($1::int[]), 'new'", [42, 77, *DML_ROWS])


@dataclass(frozen=True)
class Mutant:
    """What a code mutant changes in `_session` (nothing: a variant's own code)."""

    dml_lock: str = ""  # a statement dml1 and dml2 run before their UPDATE
    dba: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # the dba's steps, not DBA
    root_commits: bool = False  # the root commits at its last step: the run must end


async def buggy(env: Env, s: Session) -> str:
    return await _session(env, s, "")


async def fixed(env: Env, s: Session) -> str:
    return await _session(env, s, _lock_timeout(env))


def _lock_timeout(env: Env) -> str:
    return f"SET LOCAL lock_timeout = {int(env.params['ddl_lock_timeout_ms'])}; "


async def _session(env: Env, s: Session, ddl_setting: str, mutant: Mutant = Mutant()) -> str:
    """Session i plays role i of SESSIONS; the variants differ only in `ddl_setting`, a
    code mutant in what `mutant` changes."""
    role = SESSIONS[s.index % len(SESSIONS)]
    if role == "root":  # a request that locks a row and forgets to commit
        await s.conn.execute("BEGIN")
        await s.fetchrow("lock", ROOT_SQL)
        if not mutant.root_commits:
            return "idle"
        await s.execute("commit", "COMMIT")  # a mutant's run must end: at its last step
    elif role.startswith("dml"):
        async with s.transaction():
            row = DML_ROWS[int(role[-1]) - 1]
            if mutant.dml_lock:  # one step, as a simple query: the lock, then the UPDATE
                sql = f"{mutant.dml_lock}{DML_SQL.replace('$1', str(row))}"
                await s.execute("update", sql)
            else:
                await s.execute("update", DML_SQL, row)
    elif role == "upd":
        await s.execute("update", UPDATE_SQL)  # its own implicit transaction
    elif role == "ddl":
        sql = ddl_setting + ALTER_SQL
        try:
            await s.step("alter", _timed, env, s.conn, sql, shown=sql)
        except asyncpg.LockNotAvailableError:  # 55P03: the fix's answer; retry the migration
            return "55P03"
    elif role == "dba":  # what a DBA runs; what it saw goes to the evidence, for the claims
        for step, (sql, shown) in (mutant.dba or DBA).items():
            rows = await s.step(step, s.conn.fetch, sql, shown=shown, result=_psql)
            env.extra_evidence[step] = [{k: v for k, v in r.items() if k != "pid"} for r in rows]
    else:
        await s.fetchrow("read", READ_SQL)
    return "ok"


async def _timed(env: Env, conn: asyncpg.Connection, sql: str) -> str:
    """The ALTER's status; how long it waited before a 55P03 goes to env.samples."""
    t0 = time.perf_counter()
    try:
        return str(await conn.execute(sql))
    except asyncpg.LockNotAvailableError:
        env.sample("alter_gave_up_ms", (time.perf_counter() - t0) * 1000)
        raise


DBA = {  # the dba's steps: (SQL, what the transcript shows)
    "locks": (LOCKS, "locks on orders (pg_locks): who, mode, granted"),
    "tree": (TREE, "blocking tree: who, blocked_by, state"),
    "terminate": (TERMINATE, "pg_terminate_backend(the one blocked by nobody)"),
    "after": (TREE, "blocking tree: who, blocked_by, state"),
}


def _psql(rows: list[asyncpg.Record]) -> str:
    """A row per `;`, its cells as psql prints them (`ddl {root,upd} active`), no query."""

    def cell(v: object) -> str:
        return f"{{{','.join(v)}}}" if isinstance(v, list) else str(v)

    cells = [[cell(v) for k, v in r.items() if k not in ("pid", "query")] for r in rows]
    return "; ".join(" ".join(c) for c in cells) or "(none)"


async def invariant(env: Env) -> list[Check]:
    status = await env.db.fetchval("SELECT status FROM orders WHERE id = 42")
    after = env.extra_evidence.get("after")
    timeout, gave_up = env.params["ddl_lock_timeout_ms"], env.samples.get("alter_gave_up_ms", [])
    late = all(ms >= timeout for ms in gave_up)  # a 55P03 no sooner than lock_timeout
    landed = status == "paid"
    each = f"{len(gave_up)} 55P03, each at or after {timeout} ms" if late else f"after {gave_up} ms"
    return [
        Check("the updater's write landed once the root was gone", landed, f"status {status}"),
        Check("nothing waits on a lock once the root is gone", after == [], f"tree after: {after}"),
        Check("lock_timeout fires no sooner than its timeout", late, each),
    ]


# --- pinned: one canonical schedule per variant, the same steps ---------------------------
SESSIONS = ("root", "dml1", "dml2", "upd", "ddl", "r1", "r2", "r3", "dba")
STEPS = {"root": ("lock",), "dml1": ("update", "commit"), "dml2": ("update", "commit")}
STEPS |= {"upd": ("update",), "ddl": ("alter",)} | {r: ("read",) for r in ("r1", "r2", "r3")}
STEPS["dba"] = tuple(DBA)
QUEUE = schedule(
    "root lock, dml1 update, dml2 update, dba locks, dml1 commit, dml2 commit, upd update, "
    "ddl alter, r1 read, r2 read, r3 read, dba tree, dba terminate, dba after"
)
# fixed: the ALTER's lock_timeout fires by itself (*), before the readers come
QUEUE_FIXED = tuple(x.replace("alter", "alter(*)") for x in QUEUE)

# --- code mutants: read only as claims' counterfactuals (claims.py) ------------------------
# LC-9: dml1 and dml2 lock the table in a mode that conflicts with itself before updating
LOCK_TABLE = Mutant(dml_lock="LOCK TABLE orders IN SHARE ROW EXCLUSIVE MODE; ")
# LC-10: the dba cancels the root where it terminated it; an idle transaction runs no
# statement to cancel and keeps its locks. The run must end: the root commits at its own
# last step, after the dba's second look.
CANCEL = _to_root("pg_cancel_backend(pid) AS cancelled")
CANCEL_ROOT = Mutant(
    dba=DBA | {"terminate": (CANCEL, "pg_cancel_backend(the one blocked by nobody)")},
    root_commits=True,
)


async def buggy_lock_table(env: Env, s: Session) -> str:
    """buggy, dml1 and dml2 taking SHARE ROW EXCLUSIVE (self-conflicting) before updating."""
    return await _session(env, s, "", LOCK_TABLE)


async def fixed_lock_table(env: Env, s: Session) -> str:
    """fixed, dml1 and dml2 taking SHARE ROW EXCLUSIVE (self-conflicting) before updating."""
    return await _session(env, s, _lock_timeout(env), LOCK_TABLE)


async def buggy_cancel_root(env: Env, s: Session) -> str:
    """buggy, the dba cancelling the root (pg_cancel_backend) instead of terminating it."""
    return await _session(env, s, "", CANCEL_ROOT)


async def fixed_cancel_root(env: Env, s: Session) -> str:
    """fixed, the dba cancelling the root (pg_cancel_backend) instead of terminating it."""
    return await _session(env, s, _lock_timeout(env), CANCEL_ROOT)


LOCK_TABLE_MUTANTS = {"buggy": "mutant-buggy-lock-table", "fixed": "mutant-fixed-lock-table"}
CANCEL_MUTANTS = {"buggy": "mutant-buggy-cancel-root", "fixed": "mutant-fixed-cancel-root"}
ROOT_COMMITS = STEPS | {"root": ("lock", "commit")}
MUTANTS = {  # name -> (code, its sessions' steps)
    LOCK_TABLE_MUTANTS["buggy"]: (buggy_lock_table, STEPS),
    LOCK_TABLE_MUTANTS["fixed"]: (fixed_lock_table, STEPS),
    CANCEL_MUTANTS["buggy"]: (buggy_cancel_root, ROOT_COMMITS),
    CANCEL_MUTANTS["fixed"]: (fixed_cancel_root, ROOT_COMMITS),
}
MUTANT_QUEUES = {  # name -> its canonical schedule: the variant's (+ the root's commit)
    LOCK_TABLE_MUTANTS["buggy"]: QUEUE,
    LOCK_TABLE_MUTANTS["fixed"]: QUEUE_FIXED,
    CANCEL_MUTANTS["buggy"]: (*QUEUE, "root commit"),
    CANCEL_MUTANTS["fixed"]: (*QUEUE_FIXED, "root commit"),
}
PINNED = Pinned(
    code={"buggy": buggy, "fixed": fixed},
    steps={"buggy": STEPS, "fixed": STEPS},
    sessions=SESSIONS,
    schedules={"buggy": {"queue": QUEUE}, "fixed": {"queue": QUEUE_FIXED}},
    canonical_only=True,  # nine sessions: the canonical order is the story, the others noise
    mutants=MUTANTS,
    mutant_schedules={name: {"queue": queue} for name, queue in MUTANT_QUEUES.items()},
)
