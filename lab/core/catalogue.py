"""Every claim the three source documents make, by id, and the catalogue built from the code.

The ids are the lab's numbering of the documents' checkable sentences (DL = the Vietnamese
article on deadlocks, distributed locks and cron; LC = the Vietnamese article on locking and
concurrency control; DP = the Chinese article on deadlock prevention). The summaries are
the lab's own one-line paraphrases. ``render_markdown`` writes docs/claims.md: per document
how many ids a scenario reaches, then every scenario's claims as the code declares them;
``locklab claims --markdown -o docs/claims.md`` regenerates it and a test fails when it is
stale.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from lab.core.claims import Claim, Edit
from lab.core.scenario import Scenario

DOCUMENTS = {
    "DL": "deadlock-distributed-lock-cron.vi.txt (deadlocks, distributed locks, cron)",
    "LC": "locking-concurrency-control.vi.txt (locking and concurrency control)",
    "DP": "deadlock-prevention.zh.txt (deadlock prevention)",
}

CLAIM_IDS: dict[str, str] = {
    "DL-1": "PostgreSQL detects deadlocks after deadlock_timeout (1 s) and aborts one side with 40P01",
    "DL-2": "Row-lock deadlocks happen at every isolation level",
    "DL-3": "200 checkouts in cart order mostly fail with 40P01; sorted, all succeed",
    "DL-4": "Under load a deadlock cycle can span more than two sessions (tuple-lock hops)",
    "DL-5": "The buggy batch's wall time grows with deadlock_timeout",
    "DL-6": "Ids sorted as strings against ids sorted as numbers re-create the cycle",
    "DL-7": "Money transfers with a slow check inside the lock and blind retries: many 40P01",
    "DL-8": "Retrying without backoff makes the losers collide again in step",
    "DL-9": "Only 40P01/40001 are retried, not business errors",
    "DL-10": "A plain DEL after a lease expired deletes the next holder's lock",
    "DL-11": "Every lease has an overlap window; only a fencing token at the storage stops it",
    "DL-12": "GET-then-DEL from the client races with expiry; compare-and-delete must be atomic",
    "DL-13": "A longer TTL makes the overlap rarer, not impossible, and slows recovery",
    "DL-14": "Redis failover can lose a lock (and a fence INCR) not yet replicated",
    "DL-15": "An advisory lock stops a concurrent cron run",
    "DL-16": "It does not stop a rerun after a crash; only UNIQUE + ON CONFLICT does",
    "DL-17": "A pod that logs in slowly arrives after the lock is released and bills again",
    "DL-18": "A rerun walks every customer again; a checkpoint is an optimisation only",
    "DL-19": "Cache stampede: a polling lock floods Redis with GETs; singleflight does not",
    "DL-20": "At 5,000 waiters the poll loop is a GET storm (~100k GET/s)",
    "DL-21": "The poll code's other bugs: no token, no finally, recursion, no stale fallback",
    "DL-22": "'ShareLock on transaction X' in the log is a transactionid wait in pg_locks",
    "DL-23": "log_lock_waits, 40P01 per minute and invariant queries as monitoring",
    "DL-24": "Redlock is an efficiency lock: a paused holder writes after another took the quorum",
    "DL-25": "A blocked event loop opens the lease window without a GC pause",
    "DL-26": "Side effects outside the database repeat on retry unless idempotency-keyed",
    "LC-1": "A multi-row UPDATE does not guarantee lock order; SELECT ... ORDER BY FOR UPDATE does",
    "LC-2": "After 40P01 the whole transaction must be retried, not the failed statement",
    "LC-3": "An xact-level advisory lock keeps a transaction open for the whole job",
    "LC-4": "Read-compute-write at READ COMMITTED sells the last item twice",
    "LC-5": "A guarded atomic UPDATE lets exactly one buyer win",
    "LC-6": "SELECT ... FOR NO KEY UPDATE makes the second reader wait and see the new value",
    "LC-7": "An optimistic version column rejects the stale save",
    "LC-8": "At REPEATABLE READ the guarded UPDATE fails with 40001 instead",
    "LC-9": "Plain DML on the same table does not conflict at table level",
    "LC-10": "A waiting ALTER TABLE queues every later SELECT behind it",
    "LC-11": "The FK check's FOR KEY SHARE: parent UPDATE does not block a child insert",
    "LC-12": "NOWAIT fails at once, lock_timeout after the timeout, both 55P03",
    "LC-13": "FOR UPDATE on a join locks every table; FOR UPDATE OF t only t",
    "LC-14": "FOR UPDATE with LIMIT behind a concurrent change: fewer rows or out of order",
    "LC-15": "Child inserts in opposite parent order, then parent updates, deadlock via FK",
    "LC-16": "SKIP LOCKED workers never wait on or share a job; a lease reclaims dead claims",
    "LC-17": "SKIP LOCKED silently hides a job held by a stuck transaction",
    "LC-18": "SELECT-then-INSERT upsert races to 23505; INSERT ... ON CONFLICT does not",
    "LC-19": "ON CONFLICT details: no row returned, sequence gaps, one row touched once",
    "LC-20": "MERGE under concurrent inserts can still raise a unique violation",
    "LC-21": "Idempotency keys: replay when done, 409 in progress, 422 on another payload",
    "LC-22": "Session advisory locks count re-entries",
    "LC-23": "Session advisory locks through PgBouncer transaction mode leak and misfire",
    "LC-24": "A session lock not released on an exception path stays on the pooled connection",
    "LC-25": "Every lock strategy serialises on a hot row; bucket rows restore parallelism",
    "LC-26": "A transaction needs one client; statements through the pool are no transaction",
    "LC-27": "lock_timeout per transaction (SET LOCAL 3 s), not a global 100 ms",
    "LC-28": "Row locks live in the tuple, not in pg_locks, and write WAL",
    "LC-29": "Many FOR KEY SHARE lockers of one parent create MultiXacts",
    "LC-30": "A poison job fails after 5 attempts with backoff; alert on the oldest running job",
    "LC-31": "Write skew at READ COMMITTED and REPEATABLE READ; SERIALIZABLE aborts one",
    "LC-32": "A side effect inside a retried transaction repeats; an outbox sends once",
    "LC-33": "hashtext() keys can collide; the two-key advisory form separates them",
    "LC-34": "The row-lock conflict matrix of the four FOR ... modes",
    "LC-35": "The deadlock victim is usually the session whose wait ran the detector",
    "DP-1": "Inconsistent lock order deadlocks; without a detector it freezes silently",
    "DP-2": "A global lock order removes the circular wait",
    "DP-3": "A lock timeout turns a freeze into an error but does not remove the deadlock",
    "DP-4": "Try-lock, release all and back off with jitter completes",
    "DP-5": "One coarse lock cannot deadlock but serialises everything",
    "DP-6": "A lock hierarchy checker rejects out-of-order acquisition",
    "DP-7": "A wait-for graph finds the cycle and names its members",
    "DP-8": "lock_timeout '5s' against a row-lock cycle: deadlock_timeout decides first",
    "DP-9": "Deadlocks grow with traffic at the same code",
    "DP-10": "Independent services sharing Redis keys in opposite order freeze each other",
}


def id_key(cid: str) -> tuple[str, int]:
    m = re.fullmatch(r"([A-Z]+)-(\d+)", cid)
    return (m[1], int(m[2])) if m else (cid, 0)


def document_ids(doc: str) -> list[str]:
    """Every claim id of one document, in order."""
    return sorted((i for i in CLAIM_IDS if i.startswith(f"{doc}-")), key=id_key)


def document_counts() -> dict[str, int]:
    return {doc: len(document_ids(doc)) for doc in DOCUMENTS}


def reached(scenarios: Sequence[Scenario]) -> dict[str, list[str]]:
    """Claim id -> the scenarios with a claim carrying it."""
    out: dict[str, list[str]] = {}
    for sc in scenarios:
        for c in sc.claims:
            if sc.id not in out.setdefault(c.id, []):
                out[c.id].append(sc.id)
    return out


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _counterfactual(c: Claim) -> str:
    """How a claim's counterfactual is made (lab/verify/counterfactual.py), in a few words."""
    cf = c.counterfactual
    if cf is None:
        return f"{c.counterfactual_kind or 'run'}: variants swapped"
    if isinstance(cf, str):
        return f"none: {cf}"
    if isinstance(cf, Mapping):
        return f"{c.counterfactual_kind or 'run'}: swap " + ", ".join(
            f"{a}→{b}" for a, b in cf.items()
        )
    if isinstance(cf, Edit):
        return f"{cf.kind}: {cf.why}" if cf.why else cf.kind
    return "record-edit"


def render_markdown(scenarios: Sequence[Scenario]) -> str:
    """docs/claims.md: coverage per document, every id, then every scenario's claims."""
    by_id = reached(scenarios)
    claims = [c for sc in scenarios for c in sc.claims]
    lines = [
        "# Claims catalogue",
        "",
        "Generated from the code by `locklab claims --markdown -o docs/claims.md`; a test fails",
        "when this file is stale. It lists claims, not verdicts: a verdict comes from a run",
        "(`locklab verify` writes `results/<run-id>/verify/verdicts.json`, and",
        "`locklab verify --recorded <run-id>` judges that run again). Each verdict says its",
        "setup (the document's settings, or scaled: what differs), whether a knob was fitted",
        "to the number it checks (FITTED, never counted held), and what its counterfactual",
        "gave (`verify --counterfactual`): a claim that holds there too cannot fail.",
        "",
        "## Coverage per document",
        "",
        "Carried: some claim of some scenario names the id. That is all it says: whether the",
        "sentence holds is a verdict of a run.",
        "",
    ]
    for doc, title in DOCUMENTS.items():
        ids = document_ids(doc)
        hit = [i for i in ids if i in by_id]
        n = sum(1 for c in claims if c.id in ids)
        fitted = sum(1 for c in claims if c.id in ids and c.fitted)
        gaps = sum(1 for c in claims if c.id in ids and c.gap)
        lines.append(
            f"- **{doc}** {title}: {len(hit)} of {len(ids)} ids carried, by {n} claims "
            f"({fitted} fitted, {gaps} not reproduced)"
        )
    unknown = sorted(set(by_id) - set(CLAIM_IDS), key=id_key)
    if unknown:
        lines.append(f"- ids no document has: {', '.join(unknown)}")
    for doc in DOCUMENTS:
        lines += [
            "",
            f"## {doc} claims",
            "",
            "| id | claim (summary) | scenarios | claims | parts no check judges |",
            "|---|---|---|---|---|",
        ]
        for i in document_ids(doc):
            where = ", ".join(f"`{s}`" for s in by_id.get(i, [])) or "not reached"
            mine = [c for c in claims if c.id == i]
            parts = "; ".join(dict.fromkeys(p for c in mine for p in c.unjudged)) or "—"
            lines.append(
                f"| {i} | {_cell(CLAIM_IDS[i])} | {where} | {len(mine)} | {_cell(parts)} |"
            )
    lines += ["", "## Claims by scenario"]
    for sc in scenarios:
        lines += ["", f"### `{sc.id}`", "", _cell(sc.title), ""]
        lines += [
            "| id | claim | published | variants | profiles | cases | counterfactual |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in sc.claims:
            cases = ", ".join(x or "(default)" for x in c.cases)
            trials = f" ({c.trials} trials)" if c.trials > 1 else ""
            text = ("FITTED: " if c.fitted else "") + c.text
            lines.append(
                f"| {c.id} | {_cell(text)} | {_cell(c.published) or '—'} | "
                f"{', '.join(c.variants)} | {', '.join(c.profiles)}{trials} | {cases} | "
                f"{_cell(_counterfactual(c))} |"
            )
    return "\n".join(lines) + "\n"
