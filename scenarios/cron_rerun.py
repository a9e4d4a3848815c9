"""Cron rerun: an advisory lock stops a concurrent run, not a rerun after a crash.

Symptom:    the nightly billing CronJob "ran twice": customers have two invoices for the
            same period, although the job holds pg_try_advisory_lock(hashtext('billing')).
Root cause: the lock only excludes runs that overlap. pod-1 is killed (SIGKILL) after
            billing k customers; the server releases its session lock when the backend
            sees the connection die, and the Job's retry takes the lock and bills
            everyone again. A second pod that is slow to connect arrives after pod-1's
            lock is gone and bills too: concurrent on paper, sequential in practice.
Fix:        idempotency by business key: UNIQUE (customer_id, period) + INSERT ... ON
            CONFLICT DO NOTHING (fixed); the same with pg_try_advisory_xact_lock and the
            whole job in one transaction (fixed-xact-lock), which rolls a crashed run
            back but keeps a transaction open, holding the xmin horizon, for the whole job.
Published:  [ 'pod-1: billed 5', 'pod-2: skipped (lock held)' ]; job retry after crash
            (sequential): billed 5; invoices without unique: 10. With UNIQUE: run-1:
            billed 5; retry billed 0; invoices with UNIQUE(customer_id, period): 5. Side
            note: on the first measurement pod-2 took >100 ms to open its connection
            (SCRAM), arrived after pod-1 had released the lock, and both pods billed 5
            (PostgreSQL 17.11, Node 24 + node-postgres) — deadlock-distributed-lock-cron.vi.txt
See:        claims DL-15..DL-18, LC-3; scenarios/_billing_worker.py (the job and the pod
            process); -p pod2_connect=inside -p password_auth=true -p trials=50 measures
            how often both pods bill. DL-17's slow login is real: case slow-login makes
            pod-2 log in as a role whose password has SLOW_SCRAM_ITERATIONS SCRAM
            iterations (the client computes that PBKDF2 at every login; the connect time
            is measured per trial), case fast-login the same with the server's 4096.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import secrets
import statistics
import struct
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from lab import workers
from lab.aio import within
from lab.claims import Claim, Record
from lab.errors import LabError, ScenarioFailure
from lab.scenario import Check, Defaults, Env, Scenario
from scenarios._billing_worker import Billed, Job

PERIOD = "2026-09"
AMOUNT = 100
WORKER = Path(__file__).with_name("_billing_worker.py")
SCRAM_ROLE_PREFIX = "locklab_scram"  # throwaway roles; TCP logins do SCRAM on the embedded server
EVENT_TIMEOUT_S = 30.0  # a worker silent this long has failed
RELEASE_TIMEOUT_S = 10.0  # the server must notice the killed session within this
RELEASE_POLL_S = 0.001
TRACE_CUSTOMERS = 10  # trace every customer only for small jobs
MAX_TRIALS_KEPT = 200  # per-trial evidence kept in the record
CONNECT_MODES = ("before", "inside")
# DL-17: a login slow enough (the document's ">100 ms with SCRAM"), against a pod-1 whose
# job (5 customers x SLOW_BILL_PAUSE_MS) outlasts a fast login but not the slow one
SLOW_SCRAM_ITERATIONS = 600_000  # ~270 ms of client PBKDF2 per login here (idle), more under load
SLOW_LOGIN_MS = 100.0
SLOW_BILL_PAUSE_MS = 25.0
SLOW_LOGIN_TRIALS, SLOW_LOGIN_NEEDED = 3, 2  # both pods bill in at least 2 of 3
_INSIDE = {"pod2_connect": "inside", "password_auth": True, "bill_pause_ms": SLOW_BILL_PAUSE_MS,
           "trials": SLOW_LOGIN_TRIALS}  # fmt: skip
LOGIN_CASES: dict[str, dict[str, Any]] = {  # DL-17: pod-2 logs in inside the race, by SCRAM
    "slow-login": {**_INSIDE, "scram_iterations": SLOW_SCRAM_ITERATIONS},
    "fast-login": {**_INSIDE, "scram_iterations": 4096},
}
BEFORE_CRASH, AFTER_CRASH = "before the crash", "after the crash"

AT_CRASH = """
SELECT a.state, a.backend_xid::text AS xid, a.backend_xmin::text AS xmin,
       (extract(epoch FROM clock_timestamp() - a.xact_start) * 1000)::float8 AS xact_open_ms,
       xid(pg_snapshot_xmin(pg_current_snapshot()))::text AS horizon,
       EXISTS (SELECT 1 FROM pg_locks l
               WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted) AS holds_lock
FROM pg_stat_activity a WHERE a.pid = $1
"""
HOLDS_LOCK = "SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory'"
COUNTS = """
SELECT coalesce(sum(n), 0)::int AS invoices, count(*)::int AS customers,
       coalesce(max(n), 0) AS max_per_key
FROM (SELECT customer_id, count(*) AS n FROM invoices WHERE period = $1
      GROUP BY customer_id) per_key
"""


@dataclass(frozen=True)
class Fix:
    unique: bool  # UNIQUE (customer_id, period) + ON CONFLICT DO NOTHING
    xact_lock: bool  # pg_try_advisory_xact_lock, the whole job in one transaction


FIXES = {
    "buggy": Fix(unique=False, xact_lock=False),
    "fixed": Fix(unique=True, xact_lock=False),
    "fixed-xact-lock": Fix(unique=True, xact_lock=True),
}


async def setup(env: Env) -> None:
    unique = ", UNIQUE (customer_id, period)" if FIXES[env.variant].unique else ""
    await env.db.execute(
        "CREATE TABLE invoices (customer_id int NOT NULL, period text NOT NULL,"
        f" amount int NOT NULL, billed_by text NOT NULL{unique})"
    )


async def buggy(env: Env) -> None:
    await _cron(env, FIXES["buggy"])


async def fixed(env: Env) -> None:
    await _cron(env, FIXES["fixed"])


async def fixed_xact_lock(env: Env) -> None:
    await _cron(env, FIXES["fixed-xact-lock"])


# --- pods ---------------------------------------------------------------------------------


def _fail(env: Env, what: str) -> ScenarioFailure:
    return ScenarioFailure(f"{env.scenario} / {env.variant}: {what}")


class Pod:
    """One pod: a scenarios/_billing_worker.py process (lab.workers), granted step by step."""

    def __init__(self, env: Env, job: Job, worker: workers.Worker, lazy: bool) -> None:
        self.env, self.job, self.name, self.worker, self.lazy = env, job, job.pod, worker, lazy
        self.proc = worker.proc
        self.backend_pid = 0  # 0 until connected
        self.connect_ms = 0.0

    @classmethod
    async def spawn(cls, env: Env, job: Job, login: Mapping[str, str], *, lazy: bool) -> Pod:
        """Start the process; a `lazy` pod connects only when granted its first step."""
        # The job goes over stdin, so a password never shows in argv or the environment.
        config = {"dsn": env.dsn, "login": dict(login), "job": job.to_json(), "lazy": lazy}
        worker = await workers.Worker.spawn(WORKER, config, name=job.pod, ready_s=None)
        return cls(env, job, worker, lazy)

    async def started(self) -> None:
        """Wait until the process is up (lazy) or connected."""
        await self.expect("ready")
        if not self.lazy:
            self.connected(await self.expect("connected"))

    def connected(self, ev: Mapping[str, Any]) -> None:
        self.backend_pid, self.connect_ms = ev["backend_pid"], ev["connect_ms"]
        self.env.trace(self.name, "connected", ms=round(self.connect_ms, 2))

    async def grant(self, steps: int) -> None:
        """Let the pod take `steps` more steps (connect, lock, one customer each, finish)."""
        for _ in range(steps):
            self.worker.grant("go")

    async def read(self, seconds: float | None = None) -> dict[str, Any]:
        """The pod's next event (not the protocol's own); {"ev": "exit"} once it has exited
        or been killed."""
        ev = await self.worker.next(seconds, skip=("step", "returned"))
        return {"ev": ev.name, **ev.fields}

    async def expect(self, *events: str) -> dict[str, Any]:
        ev = await self.read(EVENT_TIMEOUT_S)
        if ev["ev"] not in events:
            raise await self.unexpected(ev)
        return ev

    async def unexpected(self, ev: Mapping[str, Any]) -> ScenarioFailure:
        if ev["ev"] == "exit":
            return _fail(self.env, f"{self.name} exited: {self.worker.status()}")
        return _fail(self.env, f"{self.name}: {ev.get('error') or f'unexpected {ev}'}")

    def sigkill(self) -> None:
        """SIGKILL by PID: no cleanup in the pod; the server finds its connection dead."""
        if self.proc.returncode is None:
            self.worker.sigkill()

    async def kill(self) -> None:
        await self.worker.close()


def _trace_event(env: Env, job: Job, ev: Mapping[str, Any]) -> None:
    kind = ev["ev"]
    if kind == "billed" and job.customers <= TRACE_CUSTOMERS:
        what = "billed" if ev["inserted"] else "already billed (conflict, no-op)"
        env.trace(job.pod, what, customer=ev["customer"])
    elif kind == "skipped":
        env.trace(job.pod, "skipped (lock held)")
    elif kind == "done":
        env.trace(job.pod, "done", inserted=ev["inserted"], conflicts=ev["conflicts"])
    elif kind == "locked":
        env.trace(job.pod, "locked")


@contextlib.asynccontextmanager
async def _login(env: Env) -> AsyncIterator[tuple[dict[str, str], str]]:
    """(connect kwargs, auth method) of the pods: the run's user, or a throwaway role with
    its own password and SCRAM iteration count (the method is read from the server)."""
    if not env.params["password_auth"]:
        yield {}, await _auth_method(env, {})
        return
    role = f"{SCRAM_ROLE_PREFIX}_{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(16)  # [A-Za-z0-9_-]: safe inside the literal below
    verifier = await asyncio.to_thread(_scram_verifier, password, env.params["scram_iterations"])
    async with env.db.acquire() as conn, conn.transaction():
        await conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{verifier}'")
        await conn.execute(f"GRANT SELECT, INSERT ON invoices TO {role}")
    login = {"user": role, "password": password}
    try:
        yield login, await _auth_method(env, login)
    finally:
        with contextlib.suppress(asyncpg.PostgresError):
            await env.db.execute(f"DROP OWNED BY {role}")
            await env.db.execute(f"DROP ROLE {role}")


def _scram_verifier(password: str, iterations: int) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5802/7677), made
    with `iterations` rounds of PBKDF2. Every server since 10 stores a verifier given as the
    password as it is; having the server make it (SET scram_iterations) needs 16 or later."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    stored = hashlib.sha256(hmac.digest(salted, b"Client Key", "sha256")).digest()
    server = hmac.digest(salted, b"Server Key", "sha256")
    b64 = [base64.b64encode(b).decode() for b in (salt, stored, server)]
    return f"SCRAM-SHA-256${iterations}:{b64[0]}${b64[1]}:{b64[2]}"


AUTH_REQUESTS = {0: "trust", 3: "password", 5: "md5", 7: "gss", 9: "sspi", 10: "scram-sha-256"}


async def _auth_method(env: Env, login: Mapping[str, str]) -> str:
    """How the server authenticates this login: the request it answers a startup message
    with (what SYSTEM_USER names on 16 and later; this works on any version). The probe
    hangs up before answering, which the server takes silently. 0, no request: trust (or
    peer, ident, cert, which ask the client nothing either)."""
    url = urllib.parse.urlsplit(env.dsn)
    user = login.get("user") or urllib.parse.unquote(url.username or "")
    port = url.port or 5432
    host = url.hostname or urllib.parse.parse_qs(url.query).get("host", [""])[0]
    if host.startswith("/"):
        reader, writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
    else:
        reader, writer = await asyncio.open_connection(host or "localhost", port)
    try:
        body = b"".join(
            f"{k}\0{v}\0".encode() for k, v in (("user", user), ("database", env.database))
        )
        writer.write(struct.pack("!ii", 9 + len(body), 196608) + body + b"\0")  # protocol 3.0
        kind, size = struct.unpack("!ci", await within(reader.readexactly(5), EVENT_TIMEOUT_S))
        reply = await within(reader.readexactly(size - 4), EVENT_TIMEOUT_S)
    finally:
        writer.close()
    if kind != b"R":
        raise _fail(env, f"the server refused a startup message for {user!r}: {reply!r}")
    (code,) = struct.unpack("!i", reply[:4])
    return AUTH_REQUESTS.get(code, f"auth request {code}")


# --- the choreography ---------------------------------------------------------------------
#
# One trial, on an empty invoices table; pod-1, pod-2 and the retry are worker processes.
#   pod-1 connects; pod-2 connects too (pod2_connect=before) or only starts (inside).
#   pod-1 is granted "try the lock + k customers"; after customer k it waits: the crash point.
#   pod-1 locked -> pod-2 starts: it is granted its job (before), or told to connect and
#                   granted its job once connected (inside).
#   pod-1 billed k and no lock attempt of pod-2 unanswered -> a snapshot of pod-1's session
#                   (LC-3), then SIGKILL by PID.
#   The server releases pod-1's lock when its backend sees the connection die (polled).
#   pod-2 ends; then the Job's retry connects and runs to the end, alone.
# Every step waits for the event it depends on, never for wall-clock time; whether pod-2
# tries the lock before or after the crash is the order in which we granted those steps.


@dataclass
class Race:
    """What happened from pod-1's start to both pods being done."""

    locked_at: float | None = None
    pod1_billed: int = 0
    killed_at: float | None = None
    at_crash: dict[str, Any] = field(default_factory=dict)
    pod2_asking: bool = False  # pod-2 was granted its lock attempt and has no answer yet
    pod2_after_crash: bool = False  # ... and that grant came after the SIGKILL
    pod2_result: str = ""  # billed | skipped
    pod2_sent_ms: float = 0.0
    pod2_billed: Billed = field(default_factory=Billed)
    pod2_exited: bool = False
    release: asyncio.Task[float] | None = None  # polls from the SIGKILL on, when pod-2 is done


async def _cron(env: Env, fix: Fix) -> None:
    observer = await env.connect()
    try:
        for query in (AT_CRASH, HOLDS_LOCK):  # prepared now: one round trip at the crash point
            await observer.fetch(query, 0)
        async with _login(env) as (login, auth):
            results = []
            for trial in range(1, env.params["trials"] + 1):
                try:
                    results.append(await _trial(env, fix, trial, login, observer))
                except (asyncpg.PostgresError, OSError) as exc:
                    code = getattr(exc, "sqlstate", None) or type(exc).__name__
                    raise _fail(env, f"trial {trial}: {code} {exc}") from exc
    finally:
        await observer.close()
    _summarize(env, fix, results, auth)


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["customers"] < 1:
        raise LabError(f"-p customers={p['customers']}: at least one customer")
    if not 0 <= p["crash_after"] <= p["customers"]:
        raise LabError(
            f"-p crash_after={p['crash_after']}: must be between 0 and customers ({p['customers']})"
        )
    if p["trials"] < 1:
        raise LabError(f"-p trials={p['trials']}: at least one trial")
    if p["pod2_connect"] not in CONNECT_MODES:
        raise LabError(f"-p pod2_connect={p['pod2_connect']!r}: one of {', '.join(CONNECT_MODES)}")
    if p["scram_iterations"] < 1 or p["bill_pause_ms"] < 0:
        raise LabError("-p scram_iterations must be >= 1 and bill_pause_ms >= 0")


async def _trial(
    env: Env, fix: Fix, trial: int, login: Mapping[str, str], observer: asyncpg.Connection
) -> dict[str, Any]:
    p = env.params
    n, k, inside = p["customers"], p["crash_after"], p["pod2_connect"] == "inside"

    def job(pod: str) -> Job:
        return Job(pod, n, PERIOD, AMOUNT, fix.unique, fix.xact_lock, p["bill_pause_ms"])

    await observer.execute("TRUNCATE invoices")
    env.trace("lab", f"trial {trial}", customers=n, crash_after=k)
    pods: list[Pod] = []
    race = Race()
    try:
        for name, lazy in (("pod-1", False), ("pod-2", inside), ("retry", True)):
            pods.append(await Pod.spawn(env, job(name), login, lazy=lazy))
        await asyncio.gather(*(pod.started() for pod in pods))
        pod1, pod2, retry = pods
        await _race(env, observer, pod1, pod2, k, race)
        assert race.killed_at is not None and race.locked_at is not None
        if race.release is not None:
            release_ms: float | None = round(await race.release - race.killed_at, 2)
        else:
            release_ms = None
            await _released(env, observer, pod1.backend_pid)
        env.trace("server", "pod-1's lock is released", ms_after_kill=release_ms)
        committed = int(await observer.fetchval("SELECT count(*) FROM invoices"))
        billed, retry_ms = await _retry(env, retry)
    finally:
        if race.release is not None:
            race.release.cancel()
        for pod in pods:
            await pod.kill()
    counts = await observer.fetchrow(COUNTS, PERIOD)
    assert counts is not None
    return {
        "trial": trial,
        "customers": n,
        "crash_after": k,
        "pod1": {"billed": race.pod1_billed, "connect_ms": round(pod1.connect_ms, 2)},
        "pod2": {
            "result": race.pod2_result,
            "inserted": race.pod2_billed.inserted,
            "conflicts": race.pod2_billed.conflicts,
            "connect": p["pod2_connect"],
            "connect_ms": round(pod2.connect_ms, 2),
            "arrived_ms": round(race.pod2_sent_ms - race.locked_at, 2),  # after pod-1 locked
            "arrived": AFTER_CRASH if race.pod2_after_crash else BEFORE_CRASH,
        },
        "pod1_killed_ms": round(race.killed_at - race.locked_at, 2),  # after it locked
        "release_ms": release_ms,  # SIGKILL -> first poll that saw the lock gone
        "pod1_at_crash": race.at_crash,
        "committed_before_retry": committed,
        "retry": {"inserted": billed.inserted, "conflicts": billed.conflicts, **retry_ms},
        "invoices": counts["invoices"],
        "customers_invoiced": counts["customers"],
        "max_per_key": counts["max_per_key"],
    }


async def _race(
    env: Env, observer: asyncpg.Connection, pod1: Pod, pod2: Pod, k: int, race: Race
) -> None:
    """pod-1 takes the lock and bills k customers, pod-2 starts, pod-1 is killed; until
    pod-2 has exited. Events of both pods are handled in the order they arrive."""
    events: asyncio.Queue[tuple[Pod, dict[str, Any]]] = asyncio.Queue()

    async def pump(pod: Pod) -> None:
        while True:
            ev = await pod.read()
            await events.put((pod, ev))
            if ev["ev"] in ("exit", "error"):
                return

    pumps = [asyncio.create_task(pump(pod)) for pod in (pod1, pod2)]
    try:
        await pod1.grant(1 + k)
        while race.killed_at is None or not race.pod2_exited:
            pod, ev = await within(events.get(), EVENT_TIMEOUT_S)
            _trace_event(env, pod.job, ev)
            if not _on_event(env, race, pod is pod1, ev):
                raise await pod.unexpected(ev)
            if pod is pod1 and ev["ev"] == "locked":  # pod-2 starts now
                race.pod2_asking = pod2.backend_pid != 0
                await pod2.grant(pod2.job.steps if race.pod2_asking else 1)
            elif pod is pod2 and ev["ev"] == "connected":
                pod2.connected(ev)
                race.pod2_asking, race.pod2_after_crash = True, race.killed_at is not None
                await pod2.grant(pod2.job.steps)
            crash_point = race.locked_at is not None and race.pod1_billed == k
            if crash_point and race.killed_at is None and not race.pod2_asking:
                await _crash(env, observer, pod1, race)
    finally:
        for task in pumps:
            task.cancel()


def _on_event(env: Env, race: Race, from_pod1: bool, ev: Mapping[str, Any]) -> bool:
    """Record one event of the race; False when it has no place in the choreography."""
    kind = ev["ev"]
    if from_pod1:
        if kind == "locked" and race.locked_at is None:
            race.locked_at = env.now_ms()
        elif kind == "billed":
            race.pod1_billed += 1
        return kind in ("locked", "billed") or (kind == "exit" and race.killed_at is not None)
    if kind in ("locked", "skipped"):
        race.pod2_asking = False
        race.pod2_result = "billed" if kind == "locked" else "skipped"
        race.pod2_sent_ms = (ev["sent_at"] - env.t0) * 1000  # same monotonic clock
    elif kind == "done":
        race.pod2_billed = Billed(ev["inserted"], ev["conflicts"])
    elif kind == "exit":
        race.pod2_exited = bool(race.pod2_result)
        return race.pod2_exited
    return kind in ("connected", "locked", "skipped", "billed", "done")


async def _crash(env: Env, observer: asyncpg.Connection, pod1: Pod, race: Race) -> None:
    """pod-1 waits after its k-th customer: a look at its session, then SIGKILL."""
    race.at_crash = dict(await observer.fetchrow(AT_CRASH, pod1.backend_pid) or {})
    pod1.sigkill()
    race.killed_at = env.now_ms()
    env.trace("lab", "SIGKILL pod-1", pid=pod1.proc.pid, after_customers=race.pod1_billed,
              session=race.at_crash.get("state"))  # fmt: skip
    if race.pod2_result:  # pod-2 is done with the lock: polling now disturbs nobody
        race.release = asyncio.create_task(_released(env, observer, pod1.backend_pid))


async def _released(env: Env, observer: asyncpg.Connection, backend_pid: int) -> float:
    """When the server had dropped the killed session's advisory lock (ms on the run clock)."""
    deadline = env.now_ms() + RELEASE_TIMEOUT_S * 1000
    while await observer.fetchval(HOLDS_LOCK, backend_pid):
        if env.now_ms() > deadline:
            raise _fail(env, f"pod-1's lock still held {RELEASE_TIMEOUT_S:.0f} s after SIGKILL")
        await asyncio.sleep(RELEASE_POLL_S)
    return env.now_ms()


async def _retry(env: Env, pod: Pod) -> tuple[Billed, dict[str, Any]]:
    """The Job's retry after the crash: a new pod, alone, run to the end."""
    await pod.grant(1 + pod.job.steps)  # connect, then the whole job
    pod.connected(await pod.expect("connected"))
    _trace_event(env, pod.job, await pod.expect("locked"))
    insert_ms: list[float] = []
    conflict_ms: list[float] = []
    for _ in range(pod.job.customers):
        ev = await pod.expect("billed")
        _trace_event(env, pod.job, ev)
        (insert_ms if ev["inserted"] else conflict_ms).append(ev["ms"])
        env.sample("retry_insert_ms" if ev["inserted"] else "retry_conflict_ms", ev["ms"])
    done = await pod.expect("done")
    _trace_event(env, pod.job, done)
    await pod.expect("exit")
    return Billed(done["inserted"], done["conflicts"]), {
        "connect_ms": round(pod.connect_ms, 2),
        "insert_p50_ms": _p50(insert_ms),
        "conflict_p50_ms": _p50(conflict_ms),
    }


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _summarize(env: Env, fix: Fix, trials: list[dict[str, Any]], auth: str) -> None:
    for t in trials:
        env.outcome("crashed")
        env.outcome(t["pod2"]["result"])
        env.outcome("billed")  # the retry
        env.add("trials")
        env.add("both_billed", t["pod2"]["result"] == "billed")
        env.add("pod1_billed", t["pod1"]["billed"])
        env.add("pod2_billed", t["pod2"]["inserted"])
        env.add("retry_billed", t["retry"]["inserted"])
        env.add("retry_conflicts", t["retry"]["conflicts"])
        env.add("invoices", t["invoices"])
        env.add("duplicates", t["invoices"] - t["customers_invoiced"])
        env.sample("pod1_connect_ms", t["pod1"]["connect_ms"])
        env.sample("pod2_connect_ms", t["pod2"]["connect_ms"])
        env.sample("pod2_arrived_ms", t["pod2"]["arrived_ms"])
        env.sample("pod1_killed_ms", t["pod1_killed_ms"])
        if t["release_ms"] is not None:
            env.sample("release_ms", t["release_ms"])
    first, p2 = trials[0], trials[0]["pod2"]
    pod1 = f"pod-1: billed {first['pod1']['billed']} (then SIGKILL"
    pod1 += "; rolled back)" if fix.xact_lock else ")"
    pod2 = "pod-2: " + ("skipped (lock held)" if p2["result"] == "skipped" else "billed")
    if p2["result"] == "billed":
        pod2 += f" {p2['inserted']}" + (f" ({p2['conflicts']} conflicts)" if fix.unique else "")
    label = "with UNIQUE(customer_id, period)" if fix.unique else "without unique"
    env.extra_evidence.update(
        lines=[
            f"[ '{pod1}', '{pod2}' ]",
            f"job retry after crash (sequential): billed {first['retry']['inserted']}",
            f"invoices {label}: {first['invoices']}",
        ],
        both_billed=f"{sum(t['pod2']['result'] == 'billed' for t in trials)}/{len(trials)}",
        connect={
            "pod2_connect": env.params["pod2_connect"],
            "auth": auth,
            "scram_iterations": env.params["scram_iterations"] if auth != "trust" else None,
            "pod2_connect_ms_p50": _p50([t["pod2"]["connect_ms"] for t in trials]),
            "pod2_arrived_ms_p50": _p50([t["pod2"]["arrived_ms"] for t in trials]),
            "pod1_killed_ms_p50": _p50([t["pod1_killed_ms"] for t in trials]),
        },
        trials=trials[:MAX_TRIALS_KEPT],
    )


# --- invariants and claims ----------------------------------------------------------------


async def invariant(env: Env) -> list[Check]:
    """Checked on the table after the last trial, and on every earlier trial's counts."""
    n = env.params["customers"]
    last = await env.db.fetchrow(COUNTS, PERIOD)
    assert last is not None
    trials = list(env.extra_evidence.get("trials", []))
    if trials:  # the table holds the last trial: judge that one from the database itself
        trials[-1] = {**trials[-1], **{k: last[k] for k in ("invoices", "max_per_key")}}
        trials[-1]["customers_invoiced"] = last["customers"]
    dup = [t for t in trials if t["max_per_key"] > 1]
    missing = [t for t in trials if t["customers_invoiced"] != n]
    shown = (dup or trials or [{"trial": 0, "invoices": 0, "max_per_key": 0}])[0]
    return [
        Check(
            "one invoice per (customer, period)",
            bool(trials) and not dup,
            f"{len(dup)}/{len(trials)} trials with duplicates; trial {shown['trial']}: "
            f"{shown['invoices']} invoices for {n} customers, "
            f"up to {shown['max_per_key']} per (customer, period)",
        ),
        Check(
            "every customer invoiced after the retry",
            bool(trials) and not missing,
            f"{len(trials) - len(missing)}/{len(trials)} trials invoiced all {n} customers",
        ),
    ]


def _trials(rec: Record) -> list[dict[str, Any]]:
    return list(rec.get("evidence", {}).get("trials", []))


def _of(count: int, trials: list[dict[str, Any]]) -> str:
    return f"{count}/{len(trials)} trials"


def _lock_stops_concurrent(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        ts = _trials(records[variant])
        inside = records[variant]["params"]["pod2_connect"] == "inside"
        during = [t for t in ts if t["pod2"]["arrived"] == BEFORE_CRASH]
        skipped = [t for t in during if t["pod2"]["result"] == "skipped"]
        if inside and not during:
            return None  # connecting inside the race, pod-2 never came in time: not exercised
        # Connected before the race, pod-2 always arrives in time: every trial must show it.
        held = bool(during) and len(skipped) == len(during) and (inside or len(during) == len(ts))
        return held, (
            f"{variant}: pod-2 tried while pod-1 held the lock in {_of(len(during), ts)}"
            f" (pod2_connect={'inside' if inside else 'before'}) and skipped in {len(skipped)}"
        )

    return Claim(
        "DL-15", f"{variant}: pod-2 skips while pod-1 holds the advisory lock", (variant,),
        check, published="[ 'pod-1: billed 5', 'pod-2: skipped (lock held)' ]",
    )  # fmt: skip


def _rerun_bills_again(records: Mapping[str, Record]) -> tuple[bool, str]:
    ts = _trials(records["buggy"])
    more = [t for t in ts if t["invoices"] > t["customers"]]
    lines = records["buggy"]["evidence"].get("lines", [])
    return bool(ts) and len(more) == len(ts), (
        f"buggy: invoices > customers in {_of(len(more), ts)}; trial 1: {'; '.join(lines)}"
    )


def _unique_holds(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        ts = _trials(records[variant])
        exact = [t for t in ts if t["invoices"] == t["customers"] and t["max_per_key"] == 1]
        lines = records[variant]["evidence"].get("lines", [])
        return bool(ts) and len(exact) == len(ts), (
            f"{variant}: exactly one invoice per (customer, period) in {_of(len(exact), ts)};"
            f" trial 1: {'; '.join(lines)}"
        )

    return Claim(
        "DL-16", f"{variant}: UNIQUE keeps one invoice per customer and period, every trial",
        (variant,), check, published="retry billed 0; invoices with UNIQUE(customer_id, period): 5",
    )  # fmt: skip


def _late_pod_bills(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        rec = records[variant]
        ts = _trials(rec)
        c = rec["evidence"].get("connect", {})
        both = [t for t in ts if t["pod2"]["result"] == "billed"]
        late = [t for t in both if t["pod2"]["arrived"] == AFTER_CRASH]
        if c.get("pod2_connect") == "inside" and not both:
            return None  # pod-2 always came in time: the late arrival was not exercised
        # Opened before the race, pod-2's connection costs nothing: both never bill. Opened
        # inside it, both bill exactly when pod-2 tries the lock after pod-1 has died.
        held = bool(ts) and len(late) == len(both)
        if c.get("pod2_connect") == "before":
            held = held and not both
        return held, (
            f"{variant}: both pods billed in {_of(len(both), ts)} "
            f"(pod2_connect={c.get('pod2_connect')}, auth={c.get('auth')}), each time with "
            f"pod-2 trying after the SIGKILL; p50: pod-2 connect {c.get('pod2_connect_ms_p50')}"
            f" ms, tried {c.get('pod2_arrived_ms_p50')} ms after pod-1 locked, pod-1 killed at "
            f"{c.get('pod1_killed_ms_p50')} ms"
            if held
            else f"{variant}: both billed in {_of(len(both), ts)}, {len(late)} after the crash"
        )

    return Claim(
        "DL-17", f"{variant}: pod-2 bills too only when its connection makes it arrive after"
        " pod-1 is gone", (variant,), check,
        published="pod-2 took >100 ms to connect (SCRAM): both pods billed 5",
    )  # fmt: skip


def _slow_login(case: str) -> Claim:
    """slow-login: both pods bill in >= 2 of 3 trials, each login >= 100 ms; fast-login
    (the same race, the server's default iterations): pod-2 is in time and skips."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        rec = records["buggy"]
        if any(rec["params"].get(k) != v for k, v in LOGIN_CASES[case].items() if k != "trials"):
            return None  # another setting: this case's login was not exercised
        ts = _trials(rec)
        both = [t for t in ts if t["pod2"]["result"] == "billed"]
        ms = [t["pod2"]["connect_ms"] for t in ts]
        if case == "slow-login":
            late = all(t["pod2"]["arrived"] == AFTER_CRASH for t in both)
            need = -(-SLOW_LOGIN_NEEDED * len(ts) // SLOW_LOGIN_TRIALS)  # 2 of 3, rounded up
            held = bool(ts) and len(both) >= need and late and min(ms) >= SLOW_LOGIN_MS
        else:
            held = bool(ts) and not both  # in time: the lock stops it (its login time is shown)
        c = rec["evidence"].get("connect", {})
        return held, (
            f"buggy@{case}: pod-2 logged in (scram_iterations={c.get('scram_iterations')}) in "
            f"{', '.join(f'{x:.0f}' for x in ms)} ms; pod-1 billed and died "
            f"{c.get('pod1_killed_ms_p50')} ms (p50) after locking; pod-2 tried the lock "
            f"{', '.join(str(round(t['pod2']['arrived_ms'])) for t in ts)} ms after pod-1 "
            f"locked; both pods billed in {_of(len(both), ts)} (invoices: "
            f"{', '.join(str(t['invoices']) for t in ts)})"
        )

    slow = case == "slow-login"
    text = (f"a pod-2 whose SCRAM login takes >= {SLOW_LOGIN_MS:.0f} ms arrives after pod-1 "
            f"is gone: both pods bill in >= {SLOW_LOGIN_NEEDED} of {SLOW_LOGIN_TRIALS} trials"
            if slow else "the same race with a fast login: pod-2 arrives in time and skips")  # fmt: skip
    published = 'hai "pod" đều bill 5, vì pod-2 mất hơn 100 ms để mở connection mới (SCRAM auth)'
    return Claim("DL-17", text, ("buggy",), check, published if slow else "", cases=(case,))


def _rerun_walks_all(variant: str) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        ts = _trials(records[variant])
        ok = [
            t
            for t in ts
            if t["retry"]["conflicts"] == t["committed_before_retry"]
            and t["retry"]["inserted"] == t["customers"] - t["committed_before_retry"]
        ]
        t = ts[0] if ts else {}
        r = t.get("retry", {})
        return bool(ts) and len(ok) == len(ts), (
            f"{variant}: the retry walked every customer in {_of(len(ok), ts)}; trial 1, crash "
            f"at {t.get('crash_after')}/{t.get('customers')}: {r.get('conflicts')} no-op "
            f"conflicts (p50 {r.get('conflict_p50_ms')} ms) + {r.get('inserted')} inserts "
            f"(p50 {r.get('insert_p50_ms')} ms)"
        )

    return Claim(
        "DL-18", f"{variant}: a rerun walks all customers; those billed are no-op conflicts",
        (variant,), check,
        published="crash at 25,000/50,000: the first 25,000 are fast no-op conflicts",
    )  # fmt: skip


def _xact_held_open(records: Mapping[str, Record]) -> tuple[bool, str]:
    ts = _trials(records["fixed-xact-lock"])
    held = [
        t
        for t in ts
        if t["pod1_at_crash"].get("state") == "idle in transaction"
        and (t["pod1_at_crash"].get("xid") or t["pod1_at_crash"].get("xmin"))
    ]
    s = ts[0]["pod1_at_crash"] if ts else {}
    by = s.get("xid") or s.get("xmin")
    return bool(ts) and len(held) == len(ts), (
        f"fixed-xact-lock: pod-1 mid-job is '{s.get('state')}' in {_of(len(held), ts)}; trial 1:"
        f" transaction open {s.get('xact_open_ms', 0):.1f} ms, xid {s.get('xid')}, xmin"
        f" {s.get('xmin')}; a new snapshot's xmin is {s.get('horizon')}"
        + (" (held back by pod-1)" if by and by == s.get("horizon") else "")
    )


def _session_lock_no_xact(records: Mapping[str, Record]) -> tuple[bool, str]:
    ts = _trials(records["fixed"])
    idle = [t for t in ts if t["pod1_at_crash"].get("state") == "idle"]
    ids = [t for t in idle if not (t["pod1_at_crash"].get("xid") or t["pod1_at_crash"].get("xmin"))]
    return bool(ts) and len(ids) == len(ts), (
        f"fixed: pod-1 mid-job is 'idle' with no xid or xmin in {_of(len(ids), ts)}"
    )


CLAIMS = (
    *(_lock_stops_concurrent(v) for v in FIXES),
    Claim(
        "DL-16", "buggy: the lock alone cannot stop a rerun: invoices > customers, every trial",
        ("buggy",), _rerun_bills_again,
        published="job retry after crash (sequential): billed 5; invoices without unique: 10",
    ),
    *(_unique_holds(v) for v in ("fixed", "fixed-xact-lock")),
    *(_late_pod_bills(v) for v in FIXES),
    _slow_login("slow-login"),
    _slow_login("fast-login"),
    *(_rerun_walks_all(v) for v in ("fixed", "fixed-xact-lock")),
    Claim(
        "LC-3", "fixed-xact-lock: the job's transaction stays open mid-job (holds the xmin horizon)",
        ("fixed-xact-lock",), _xact_held_open,
        published="job chạy bao lâu thì transaction mở bấy lâu, giữ xmin horizon và chặn VACUUM",
    ),
    Claim(
        "LC-3", "fixed: a session lock holds no transaction between customers",
        ("fixed",), _session_lock_no_xact,
    ),
)  # fmt: skip

SCENARIO = Scenario(
    id="cron-rerun",
    validate=validate,
    doc=__doc__ or "",
    kind="script",
    variants={"buggy": buggy, "fixed": fixed, "fixed-xact-lock": fixed_xact_lock},
    outcomes=("billed", "skipped", "crashed"),
    claims=CLAIMS,
    published={
        "buggy": "[ 'pod-1: billed 5', 'pod-2: skipped (lock held)' ]; job retry after crash"
        " (sequential): billed 5; invoices without unique: 10",
        "fixed": "run-1: billed 5; job retry after crash (sequential): billed 0;"
        " invoices with UNIQUE(customer_id, period): 5",
    },
    setup=setup,
    invariant=invariant,
    defaults=Defaults(n=2, run_timeout_s=600),
    params={
        "customers": 5,
        "crash_after": 5,
        "trials": 1,
        "pod2_connect": "before",
        "password_auth": False,
        "scram_iterations": 4096,
        "bill_pause_ms": 0.0,
    },
    param_help={
        "customers": "customers billed for period 2026-09",
        "crash_after": "pod-1 is SIGKILLed after billing this many customers (0..customers)",
        "trials": "concurrent starts (each followed by the crash and the retry)",
        "pod2_connect": "before: pod-2's connection is open before the race; inside: "
        "pod-2 opens it when pod-1 has the lock",
        "password_auth": "pods log in as a throwaway role with its own SCRAM iterations (else as the lab's user)",
        "scram_iterations": "SCRAM iterations of that role's password (server default 4096)",
        "bill_pause_ms": "other work per customer (the payment call) while holding the lock",
    },
    uses=frozenset({"pg"}),
    sources=("DL", "LC"),
    quick={"trials": 2},
    headline={"invoices": "invoices"},
    cases=LOGIN_CASES,
)
