"""Money transfer: four bugs in one function (lock order, I/O under a lock, retries, keys).

Symptom:    opposite transfers fail with 40P01 even after 5 retries; a replay moves money twice.
Root cause: lock `from`, call a 50 ms fraud service holding it, lock `to`: opposite transfers
            hold one row each and wait for the other. Every error is retried at once (the
            losers meet again), a business error (CHECK balance >= 0, 23514) included.
Fix:        fraud check outside the transaction; an idempotency key; both rows locked in one
            statement ORDER BY id; the balance checked in the UPDATE's WHERE; retry only
            40P01/40001, 3 attempts, full jitter. buggy-jitter: buggy plus that backoff only.
Published:  buggy {"ok":11,"40P01":29} attempts=215 in 434769 ms; fixed {"ok":40} attempts=40
            in 5841 ms; total 200000 — deadlock-distributed-lock-cron.vi.txt ("Money transfer")
See:        claims DL-7..DL-9, LC-2 in claims.py (versions, what is not reproduced); expected/.
            Pinned, a retried attempt is one step `retry`: the whole transaction again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from lab.core.scenario import Env, executes
from lab.core.steps import Pinned, Session, schedule, show_sql

ACCOUNTS = (1, 2)
INITIAL_BALANCE = 100_000
TOTAL = INITIAL_BALANCE * len(ACCOUNTS)
BUGGY_ATTEMPTS, FIXED_ATTEMPTS = 1 + 5, 3  # buggy: retry(..., { retries: 5, retryOn: () => true })
RETRYABLE = ("40P01", "40001")  # deadlock_detected, serialization_failure
JITTER_BASE_MS, JITTER_CAP_MS = 50, 1000
LOCK = "SELECT * FROM accounts WHERE id = $1 FOR UPDATE"
DEBIT = "UPDATE accounts SET balance = balance - $2 WHERE id = $1"
DEBIT_IF_FUNDS = DEBIT + " AND balance >= $2"  # the fix's debit
CREDIT = "UPDATE accounts SET balance = balance + $2 WHERE id = $1"
RECORD = """INSERT INTO transfers (idem_key, from_id, to_id, amount) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING"""
LOCK_BOTH = "SELECT id FROM accounts WHERE id = ANY($1::int[]) ORDER BY id FOR UPDATE"
schema = executes("""
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0));
CREATE TABLE transfers (id bigserial PRIMARY KEY, idem_key text NOT NULL UNIQUE,
  from_id int NOT NULL, to_id int NOT NULL, amount bigint NOT NULL)""")
setup = executes(f"INSERT INTO accounts SELECT unnest(ARRAY{list(ACCOUNTS)}), {INITIAL_BALANCE}")
Attempt = Callable[[Session], Awaitable[str]]  # one try of the whole transaction
Retryable = Callable[[Exception], bool]  # which errors a retry policy retries


class InsufficientFunds(Exception):
    """The business error: rolls the transaction back, and is never retried."""


def transfer_of(env: Env, i: int) -> tuple[str, int, int, int]:
    """Actor i sends request i (or i mod idem_keys: a replay); even requests go 1→2."""
    keys = env.params["idem_keys"]
    req = i % keys if keys > 0 else i
    src, dst = ACCOUNTS if req % 2 == 0 else ACCOUNTS[::-1]
    return f"transfer-{req}", src, dst, env.params["amount"]


async def buggy(env: Env, s: Session, jitter: bool = False) -> str:
    _, src, dst, amount = transfer_of(env, s.index)
    shown = f"{show_sql(DEBIT, (src, amount))}; {show_sql(CREDIT, (dst, amount))}"

    async def move(s: Session) -> str:  # one step: both rows are locked by now
        debited = await s.conn.execute(DEBIT, src, amount)
        return f"{debited}; {await s.conn.execute(CREDIT, dst, amount)}"

    async def attempt(s: Session) -> str:
        async with s.transaction():
            await s.execute("lock-from", LOCK, src)
            await s.other_logic(env.params["fraud_ms"] / 1000)  # the fraud "HTTP call", locked
            await s.execute("lock-to", LOCK, dst)
            await s.step("move", move, s, shown=shown)
        env.add(f"committed_{src}_to_{dst}")
        return "ok"

    return await retried(env, s, attempt, BUGGY_ATTEMPTS, lambda exc: True, jitter)


async def debit_first(env: Env, s: Session) -> str:
    """Not a variant: buggy with its debit before the `to` row's lock, in buggy's steps
    (lock-from debits too). In a whole transaction the result is buggy's; the code mutant
    (lab.core.mutants.commits_partial) that drops all-or-nothing needs that write first."""
    _, src, dst, amount = transfer_of(env, s.index)
    shown = f"{show_sql(LOCK, (src,))}; {show_sql(DEBIT, (src, amount))}"

    async def take(s: Session) -> str:  # one step, buggy's lock-from: lock `from`, debit it
        await s.conn.execute(LOCK, src)
        return str(await s.conn.execute(DEBIT, src, amount))

    async def attempt(s: Session) -> str:
        async with s.transaction():
            await s.step("lock-from", take, s, shown=shown)
            await s.other_logic(env.params["fraud_ms"] / 1000)  # the fraud "HTTP call", locked
            await s.execute("lock-to", LOCK, dst)
            await s.execute("move", CREDIT, dst, amount)  # buggy's move, the debit done
        env.add(f"committed_{src}_to_{dst}")
        return "ok"

    return await retried(env, s, attempt, BUGGY_ATTEMPTS, lambda exc: True, jitter=False)


def _retryable(exc: BaseException) -> bool:
    """Fixed retries only a deadlock or a serialization failure (buggy: everything)."""
    return getattr(exc, "sqlstate", None) in RETRYABLE


async def buggy_jitter(env: Env, s: Session) -> str:
    return await buggy(env, s, jitter=True)  # the only difference from buggy


async def fixed(env: Env, s: Session) -> str:
    key, src, dst, amount = transfer_of(env, s.index)
    await s.other_logic(env.params["fraud_ms"] / 1000)  # 1. the fraud check, no lock held

    async def attempt(s: Session) -> str:
        try:
            async with s.transaction():  # 4. idempotency: one ledger row per transfer key
                if await s.execute("record", RECORD, key, src, dst, amount) == "INSERT 0 0":
                    return "duplicate"
                await s.execute("lock-both", LOCK_BOTH, [src, dst])  # 2. one statement, one order
                if await s.execute("debit", DEBIT_IF_FUNDS, src, amount) == "UPDATE 0":
                    raise InsufficientFunds  # 4. the balance check lives in the WHERE
                await s.execute("credit", CREDIT, dst, amount)
        except InsufficientFunds:
            return "insufficient_funds"  # rolled back, and a word, not an error: no retry
        env.add(f"committed_{src}_to_{dst}")
        return "ok"

    return await retried(env, s, attempt, FIXED_ATTEMPTS, _retryable, jitter=True)  # 3. only these


async def retried(
    env: Env, s: Session, attempt: Attempt, attempts: int, retry_on: Retryable, jitter: bool
) -> str:
    """The whole transaction again from its first read, up to `attempts` times. Pinned, a
    retried attempt is the one step `retry` (its statements run inside it, ungranted)."""
    rng, who = env.rng(s.index), f"transfer-{s.index}"
    for n in range(1, attempts + 1):
        env.add("attempts")
        began, again = env.now_ms(), s.inside_step()  # `again`: not gated
        try:
            shown = f"attempt {n}: the whole transaction again"
            word = await (attempt(s) if n == 1 else s.step("retry", attempt, again, shown=shown))
        except Exception as exc:
            code = str(getattr(exc, "sqlstate", None) or type(exc).__name__)
            env.trace(who, code, attempt=n, ms=round(env.now_ms() - began, 1))
            if n == attempts or not retry_on(exc):
                env.sample("attempts_per_transfer", n)
                raise
            env.add(f"retried_{code}")
            if jitter:  # full jitter: anywhere between 0 and the exponential cap
                await s.other_logic(rng.random() * min(JITTER_CAP_MS, JITTER_BASE_MS * 2**n) / 1000)
            continue
        env.trace(who, word, attempt=n, ms=round(env.now_ms() - began, 1))
        env.sample("attempts_per_transfer", n)
        if n > 1 and word == "ok":
            env.add("ok_after_retry")
        return word
    raise AssertionError("unreachable: the last attempt returns or raises")


# --- pinned: s1 sends 1→2, s2 sends 2→1 ---------------------------------------------------
BUGGY = dict.fromkeys(("s1", "s2"), ("lock-from", "lock-to", "move", "commit", "retry"))
FIXED = dict.fromkeys(("s1", "s2"), ("record", "lock-both", "debit", "credit", "commit"))
# each holds its `from` row before either asks for its `to` row: the cycle
CROSS = schedule(
    "s1 lock-from, s2 lock-from, s1 lock-to, s2 lock-to, s1 move, s2 move, s1 commit, s2 commit, "
    "s1 retry, s2 retry"
)
# the same start, fixed: s2 waits for both rows instead of holding one
FIXED_CROSS = schedule(
    "s1 record, s2 record, s1 lock-both, s2 lock-both, s1 debit, s1 credit, s1 commit, "
    "s2 debit, s2 credit, s2 commit"
)
PINNED = Pinned(
    code={"buggy": buggy, "buggy-jitter": buggy_jitter, "fixed": fixed},
    steps={"buggy": BUGGY, "buggy-jitter": BUGGY, "fixed": FIXED},
    schedules={"buggy": {"cross": CROSS}, "buggy-jitter": {"cross": CROSS}}
    | {"fixed": {"cross": FIXED_CROSS}},
    explore=("buggy", "fixed"),
)
