"""Side effects: a provider that times out after charging, a message in a retried transaction.

Symptom:    a customer was charged twice for one invoice, and customers get the same
            "invoice paid" message two or three times, although the billing row is
            written once and every transaction commits once.
Root cause: work outside the fenced storage is not rolled back and not fenced. (1) The
            payment provider charged, then answered after the client's timeout; the
            client retried the call, and without an idempotency key the provider charged
            again. (2) A transaction that sends a message in its body and is retried
            after 40P01 (the right retry) sends the message once per attempt: the
            rollback undid the rows, not the message.
Fix:        (1) every charge carries `Idempotency-Key: bill:{customer}:{period}`; the
            provider answers a key it has seen with the stored charge. (2) an outbox: the
            transaction inserts the message into `outbox`; after commit a relay sends
            each unsent row once and marks it sent (fixed).
Published:  no run; deadlock-distributed-lock-cron.vi.txt: "provider timeout sau khi đã
            xử lý" as a fault to inject, "idempotency key bill:{customer}:{period} khi gọi
            payment provider", "side effect ra ngoài (email, gọi API) không có fencing";
            locking-concurrency-control.vi.txt: "retry toàn bộ transaction sau 40P01 là
            đúng, nhưng nếu trong fn có gửi email hay gọi payment thì side effect bị lặp.
            Đưa side effect ra sau commit (outbox pattern)".
See:        DL-26, LC-32 in claims.py; lab/kit/provider.py (the provider: a real HTTP server in a
            worker process on loopback, started by the run, stopped with it). The client's
            timeout is CLIENT_TIMEOUT_S, the provider's late answer LATE_REPLY_S; the deadlock
            is forced (both hold their first row before either asks for the second) and
            detected by PostgreSQL. Often there are two: the victim's immediate retry updates
            the row it just released before the woken survivor does, and the survivor is the
            next victim (4 attempts, 2 commits). The claims count messages per attempt and per
            commit, whatever the number of attempts.
"""

from __future__ import annotations

import asyncio

import asyncpg

from lab.aio import within
from lab.core.scenario import Check, Env
from lab.kit.provider import Provider

CUSTOMER = "c-1"
PERIOD = "2026-09"
AMOUNT = 100
CLIENT_TIMEOUT_S = 0.5  # the billing job's HTTP timeout (an answer on time takes ~ms)
LATE_REPLY_S = 2.0  # the provider's first answer comes this late, after it charged
MAX_ATTEMPTS = 5  # the job retries a timed-out call / a 40P01 transaction this often


# The provider is the run's (claims.py starts it after setup, reads its log and stops it
# after the variant): env.state["provider"].
async def buggy(env: Env) -> None:
    provider: Provider = env.state["provider"]
    await bill(env, provider, key=None)
    await pay_invoices(env, provider, outbox=False)


async def fixed(env: Env) -> None:
    provider: Provider = env.state["provider"]
    await bill(env, provider, key=f"bill:{CUSTOMER}:{PERIOD}")
    await pay_invoices(env, provider, outbox=True)


async def setup(env: Env) -> None:
    await env.db.execute("""
        CREATE TABLE accounts (id int PRIMARY KEY, paid int NOT NULL DEFAULT 0);
        INSERT INTO accounts (id) VALUES (1), (2);
        CREATE TABLE outbox (id bigserial PRIMARY KEY, body text NOT NULL, sent_at timestamptz);
    """)


async def bill(env: Env, provider: Provider, key: str | None) -> None:
    """(1) Charge once; retry when the provider does not answer in time."""
    headers = {"Idempotency-Key": key} if key else {}
    body = {"customer": CUSTOMER, "period": PERIOD, "amount": AMOUNT}
    for attempt in range(1, MAX_ATTEMPTS + 1):
        env.add("charge_calls")
        try:
            reply = await provider.post("/charges", body, headers, env.params["client_timeout_s"])
        except TimeoutError:
            env.trace("job", "charge timed out", attempt=attempt)
            continue
        env.trace("job", "charged", attempt=attempt, replayed=reply["replayed"])
        env.outcome("charged")
        return
    env.outcome("charge_failed")


async def pay_invoices(env: Env, provider: Provider, *, outbox: bool) -> None:
    """(2) Two transactions touch accounts 1 and 2 in opposite orders; each tells the
    customer. Both hold their first row before either asks for its second: a deadlock."""
    both_first = asyncio.Barrier(2)

    async def tx(who: str, first: int, second: int) -> None:
        conn = await env.connect()
        for attempt in range(1, MAX_ATTEMPTS + 1):
            env.add("attempts")
            try:
                async with conn.transaction():
                    await conn.execute("UPDATE accounts SET paid = paid + 1 WHERE id = $1", first)
                    msg = f"{who}: invoice paid"
                    if outbox:
                        await conn.execute("INSERT INTO outbox (body) VALUES ($1)", msg)
                    else:  # the bug: a side effect inside the transaction's body
                        await provider.post("/messages", {"to": who, "body": msg}, {}, 10)
                    if attempt == 1:
                        await within(both_first.wait(), 10)
                    await conn.execute("UPDATE accounts SET paid = paid + 1 WHERE id = $1", second)
            except asyncpg.DeadlockDetectedError:
                env.add("40P01")
                env.trace(who, "40P01, retrying the whole transaction", attempt=attempt)
                continue
            env.add("commits")
            if outbox:
                await relay(conn, provider)
            env.outcome("committed")
            return
        env.outcome("40P01")

    await asyncio.gather(tx("t1", 1, 2), tx("t2", 2, 1))


async def relay(conn: asyncpg.Connection, provider: Provider) -> None:
    """After commit: send each unsent outbox row once, then mark it sent."""
    async with conn.transaction():
        rows = await conn.fetch(
            "SELECT id, body FROM outbox WHERE sent_at IS NULL ORDER BY id FOR UPDATE SKIP LOCKED"
        )
        for row in rows:
            await provider.post(
                "/messages", {"to": row["body"].split(":")[0], "body": row["body"]}, {}, 10
            )
            await conn.execute("UPDATE outbox SET sent_at = now() WHERE id = $1", row["id"])


async def invariant(env: Env) -> list[Check]:
    log = env.extra_evidence.get("provider", {})
    charges = [
        c for c in log.get("charges", []) if (c["customer"], c["period"]) == (CUSTOMER, PERIOD)
    ]
    messages, commits = len(log.get("messages", [])), env.counters.get("commits", 0)
    return [
        Check(ONE_CHARGE, len(charges) == 1, f"{len(charges)} charge(s) for {CUSTOMER}/{PERIOD}"),
        Check(ONE_MESSAGE, messages == commits, f"{messages} message(s), {commits} commit(s)"),
    ]


ONE_CHARGE = "one charge per customer and period"
ONE_MESSAGE = "one message per committed transaction"
