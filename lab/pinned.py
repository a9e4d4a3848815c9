"""Pinned runs: one schedule (`locklab trace`) or every interleaving (`locklab explore`).

One database serves a whole command: before each run its ``public`` schema is dropped
and the scenario's setup runs again (a scenario with a ``schema`` has its tables emptied
instead, while nothing changed them: lab/fastreset.py), each session gets a fresh
connection, and after the
run the sessions' backends are terminated (waiting until they are gone, so no lock of one
run outlives it). The scenario's invariants are checked after every run, as after a load.

An explore record keeps, per variant and isolation level, how many interleavings kept
every invariant, how many broke one and how (each session's outcome word or SQLSTATE),
how many were invalid (a blocked session asked for its next step), the first failing
schedule's transcript and the canonical schedules' results. Claims marked ``explore``
are judged on it (``locklab verify``).

Every run keeps the times its runner measured (``timing``: each step's grant, block and
end in ms from the schedule's start). A trace record keeps its runs so, and says where
``--svg`` drew them; ``locklab report`` draws the runs of both records (lab/trace_svg.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import platform
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import asyncpg

from lab import __version__
from lab.claims import Claim, Record, mutation
from lab.errors import LabError, ScenarioFailure
from lab.fastreset import Baseline, baseline, fast_reset
from lab.redisclients import redis_client
from lab.results import (
    SCHEMA_VERSION,
    git_commit,
    read_record,
    results_root,
    write_json,
    write_text,
)
from lab.runner import GONE, admin_connect, database_name, probe_pg
from lab.scenario import Check, Env, Observer, Scenario, start_observers, stop_observers
from lab.sequencer import (
    RESOLVE_S,
    InvalidPermutation,
    Sequencer,
    count_interleavings,
    interleavings,
)
from lab.servers import Servers
from lab.servers.base import with_database
from lab.steps import ISOLATION_LEVELS, Pinned, parse_step
from lab.trace_svg import Picture, document, picture_of

EXPLORE_DIR = "explore"
TRACE_DIR = "trace"
STEP_ERROR = re.compile(r"\bERROR ([0-9A-Z]{5}) ")  # a step's error line in a transcript


@dataclass
class PinnedResult:
    """One pinned run: what each session ended with, the invariants, the transcript."""

    variant: str
    schedule: tuple[str, ...]
    isolation: str
    name: str = ""  # the canonical schedule's name, "" for an explored interleaving
    outcomes: dict[str, str] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    transcript: str = ""
    waited: list[str] = field(default_factory=list)  # steps the server showed blocked
    invalid: str = ""  # why the permutation was invalid ("" when it ran)
    invalid_at: int = -1
    evidence: dict[str, Any] = field(default_factory=dict)  # env.extra_evidence of the run
    timing: dict[str, Any] = field(default_factory=dict)  # lab.sequencer.StepClock.to_json

    @property
    def kept(self) -> bool:
        return all(c.held for c in self.checks)

    @property
    def signature(self) -> str:
        return " ".join(f"{s}={o}" for s, o in self.outcomes.items())

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "schedule": list(self.schedule),
            "outcomes": self.outcomes,
            "invariants": [c.to_json() for c in self.checks],
            "kept": self.kept,
            "waited": self.waited,
            "transcript": self.transcript,
            "evidence": self.evidence,
            "timing": self.timing,
        }


def expected_dir(scenario: Scenario) -> Path:
    """The scenario's folder of golden transcripts: expected/ beside its code."""
    import sys

    module = next(iter(pinned_of(scenario).code.values())).__module__
    return Path(str(sys.modules[module].__file__)).parent / "expected"


def expected_name(variant: str, schedule: str, isolation: str = "read_committed") -> str:
    """`buggy.both-read-first.out`; another level than READ COMMITTED is named too."""
    level = "" if isolation == "read_committed" else f".{isolation}"
    return f"{variant}.{schedule}{level}.out"


def pinned_of(scenario: Scenario) -> Pinned:
    if scenario.pinned is None:
        raise LabError(
            f"{scenario.id} has no pinned sessions yet; trace and explore cover: "
            + ", ".join(_pinned_ids())
        )
    return scenario.pinned


def _pinned_ids() -> list[str]:
    from scenarios import SCENARIOS

    return [s.id for s in SCENARIOS if s.pinned is not None]


def isolation_levels(scenario: Scenario, spec: str | None) -> list[str]:
    """`read_committed,serializable` -> levels; None -> the scenario's own default."""
    if spec is None:
        return [str(scenario.params.get("isolation", "read_committed"))]
    levels = list(dict.fromkeys(x.strip() for x in spec.split(",") if x.strip()))
    bad = [x for x in levels if x not in ISOLATION_LEVELS]
    if bad or not levels:
        raise LabError(f"--isolation {spec!r}: choose from {', '.join(ISOLATION_LEVELS)}")
    if "isolation" not in scenario.params and levels != ["read_committed"]:
        raise LabError(f"{scenario.id} has no isolation parameter; it runs at read_committed")
    return levels


def schedules_for(
    scenario: Scenario, variants: Sequence[str], schedule: str | None
) -> list[tuple[str, str, tuple[str, ...]]]:
    """(variant, schedule name, steps) to trace: every canonical schedule of each variant,
    the one named, or the steps given ("s1 read, s2 read, ...", checked against the
    declared steps)."""
    pinned = pinned_of(scenario)
    out: list[tuple[str, str, tuple[str, ...]]] = []
    if schedule is not None and ("," in schedule or " " in schedule.strip()):
        steps = tuple(x.strip() for x in schedule.split(",") if x.strip())
        for v in variants:
            check_steps(scenario, v, steps)
            out.append((v, "custom", steps))
        return out
    for v in variants:
        named = pinned.schedules.get(v, {})
        for name, steps in named.items():
            if schedule is None or name == schedule:
                out.append((v, name, steps))
    if not out:
        known = sorted({n for v in variants for n in pinned.schedules.get(v, {})})
        raise LabError(
            f"{scenario.id} has no schedule {schedule!r} for {', '.join(variants)} "
            f"(schedules: {', '.join(known) or 'none'}; or give steps: 's1 read, s2 read, ...')"
        )
    return out


def check_steps(scenario: Scenario, variant: str, steps: Sequence[str]) -> None:
    """Every item names a session and one of its declared steps, in the session's order."""
    declared = pinned_of(scenario).steps[variant]
    pos = dict.fromkeys(declared, 0)
    for item in steps:
        who, step = parse_step(item)
        if who not in declared:
            raise LabError(f"step {item!r}: {scenario.id} has sessions {', '.join(declared)}")
        own = declared[who]
        if step not in own:
            raise LabError(
                f"step {item!r}: {scenario.id} / {variant} {who} has steps {', '.join(own)}"
            )
        i = own.index(step)
        if i < pos[who]:
            raise LabError(f"step {item!r}: {who} takes its steps in the order {', '.join(own)}")
        pos[who] = i + 1


# --- one database for a command ----------------------------------------------------------


async def _read_only(conn: asyncpg.Connection) -> None:
    """The watch pool's reset: its queries change no session state, so nothing to undo."""


async def watch_pool(dsn: str) -> asyncpg.Pool:
    """A small pool for the sequencer's looks at the server (read-only queries)."""
    pool: asyncpg.Pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2, reset=_read_only)
    return pool


class PinnedDatabase:
    """One database for pinned runs: reset before every run (the public schema dropped, the
    run's Redis keys deleted, then the caller's setup), and the sessions' connections, kept
    for the next run after a clean one or ended, their backends waited for. PinnedLab runs a
    scenario's sessions on it; lab/testing.py a user's own coroutines."""

    def __init__(self, app: str, dsn: str = "", pool: asyncpg.Pool | None = None) -> None:
        self.app = app  # the sessions' application_name, before "/<session>"
        self.dsn = dsn
        self.pool = pool
        # the sequencer's look at pg_stat_activity / pg_locks, many times a step: read-only,
        # so its pool skips asyncpg's reset query (a round trip) on every release
        self.watch: asyncpg.Pool | None = None
        self.redis: Any = None
        self.prefix = ""  # the run's Redis keys (with a client in `redis`)
        self._idle: list[asyncpg.Connection] = []  # session connections free for a run
        self._all: list[asyncpg.Connection] = []
        self._pids: dict[int, int] = {}  # id(connection) -> its backend's pid
        self._base: Baseline | None = None  # public right after the schema ran (fast reset)
        self.full_resets = 0  # resets that dropped public and ran the schema again
        self.fast_resets = 0  # resets that emptied the tables back to the schema's state
        self.slow_why = ""  # why the schema's database cannot take the fast path ("" if it can)

    async def reset(
        self,
        setup: Callable[[], Awaitable[object]] | None = None,
        schema: Callable[[], Awaitable[object]] | None = None,
        key: str = "",
    ) -> None:
        """Drop what the last run made, then run `schema` and `setup`. With a `schema`, a
        database whose public schema is still as `schema` (run for the same `key`) left it
        is only emptied back to that state (lab/fastreset.py); otherwise public is dropped
        and made again."""
        assert self.pool is not None
        base, self._base = self._base, None  # a reset that fails leaves the full path next
        fast = False
        # the watch pool: a reset leaves no session state (its SET is LOCAL), so the round
        # trip of the main pool's reset-on-release buys nothing
        tables = self.watch or self.pool
        if schema is not None and base is not None and base.key == key:
            async with tables.acquire() as conn:
                fast = await fast_reset(conn, base)
        if fast:
            self.fast_resets += 1
        else:
            self.full_resets += 1
            await self.pool.execute("DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public")
            base = None
            if schema is not None:
                await schema()
                async with tables.acquire() as conn:
                    got = await baseline(conn, key)
                base, self.slow_why = (None, got) if isinstance(got, str) else (got, "")
        if self.redis is not None:
            keys = [k async for k in self.redis.scan_iter(match=f"{self.prefix}*", count=1000)]
            if keys:
                await self.redis.delete(*keys)
        if setup is not None:
            await setup()
        self._base = base

    async def session(self, name: str) -> asyncpg.Connection:
        """An idle session connection from an earlier clean run, or a new one."""
        if self._idle:
            return self._idle.pop(0)
        app = f"{self.app}/{name}"[:63]
        conn: asyncpg.Connection = await asyncpg.connect(
            self.dsn, server_settings={"application_name": app}
        )
        self._all.append(conn)
        self._pids[id(conn)] = conn.get_server_pid()
        return conn

    def keep(self, conns: list[asyncpg.Connection]) -> None:
        """Sessions whose code ran to its end (no transaction left): free for the next run."""
        self._idle += conns

    async def end_sessions(self, conns: list[asyncpg.Connection]) -> None:
        """Close the sessions and wait until the server has ended their backends."""
        pids = [self._pids.pop(id(c)) for c in conns if id(c) in self._pids]
        for c in conns:
            if not c.is_closed():
                c.terminate()
        self._all = [c for c in self._all if all(c is not e for e in conns)]
        conns.clear()
        if pids and self.pool is not None:
            await self.pool.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                " WHERE pid = ANY($1::int[])",
                pids,
            )

    def terminate_all(self) -> None:
        """End every session connection at once (the database is about to be dropped)."""
        for conn in self._all:
            conn.terminate()


class PinnedLab(PinnedDatabase):
    """A database for pinned runs of one scenario, reset before every run."""

    def __init__(
        self, scenario: Scenario, servers: Servers, run_id: str, deadlock_ms: int, lane: str = ""
    ):
        super().__init__(f"locklab/{scenario.id}/pinned")
        self.scenario = scenario
        self.servers = servers
        self.run_id = run_id
        self.deadlock_ms = deadlock_ms
        # `lane`: explores of one scenario side by side each have a database of their own
        self.database = database_name(run_id, scenario.id, f"pinned{lane}")
        self.prefix = f"locklab:{run_id}:pinned{lane}:"

    async def prepare(self, variant: str, isolation: str) -> Env:
        """The run's env, the database reset and set up for it."""
        sc, pinned = self.scenario, pinned_of(self.scenario)
        params = {**sc.params, **pinned.params}
        if "isolation" in params:
            params["isolation"] = isolation
        env = Env(
            scenario=sc.id, variant=variant, dsn=self.dsn, database=self.database, db=self.pool,
            redis=self.redis, prefix=self.prefix, params=params, seed=1, n=len(pinned.sessions),
            redis_url=self.servers.redis.url if self.servers.redis is not None else "",
        )  # fmt: skip
        setup, schema = sc.setup, sc.schema
        await self.reset(
            None if setup is None else lambda: setup(env),
            None if schema is None else lambda: schema(env),
            key=f"{variant} {sorted(params.items())!r}",  # a new run of the schema for each
        )
        return env

    async def run(
        self, variant: str, schedule: Sequence[str], *, isolation: str, name: str = ""
    ) -> PinnedResult:
        """Reset, set up, run the sessions under `schedule`, check the invariants."""
        sc, pinned = self.scenario, pinned_of(self.scenario)
        assert self.pool is not None
        env = await self.prepare(variant, isolation)
        res = PinnedResult(variant, tuple(schedule), isolation, name)
        conns: list[asyncpg.Connection] = []
        clean = False
        observed: list[Observer] = []
        try:
            observed = await start_observers(sc.observers, env)
            conns = list(await asyncio.gather(*(self.session(s) for s in pinned.sessions)))
            code = pinned.code[variant]

            def bind(c: Any) -> Any:
                return lambda s: c(env, s)

            sessions = {
                s: (conn, bind(code)) for s, conn in zip(pinned.sessions, conns, strict=True)
            }
            kw: dict[str, Any] = dict(
                label=f"{sc.id} / {variant} / {name or 'interleaving'}",
                header=self.header(variant, name or "interleaving", isolation),
                resolve_timeout=max(RESOLVE_S, 3 * self.deadlock_ms / 1000),
            )
            # a cast with worker processes and faults (lab/stage.py) has a runner of its own
            stage = getattr(pinned, "stage", None)
            own = pinned.ends_by_itself.get(variant, frozenset())
            seq: Any = (
                Sequencer(self.watch or self.pool, sessions, ends_by_itself=own, **kw)
                if stage is None
                else stage(env, variant, sessions, explored=not name, **kw)
            )
            try:
                res.outcomes = await seq.run(schedule)
            except InvalidPermutation as exc:
                # the sequencer rolled every session back (or closed its connection)
                clean = not any(c.is_closed() or c.is_in_transaction() for c in conns)
                res.invalid, res.invalid_at = exc.why, exc.at
                seq.transcript.add(schedule[exc.at], "", f"(invalid permutation: {exc.why})")
                res.transcript = seq.transcript.text()
                return res
            finally:
                res.waited = list(seq.waited)
                res.timing = seq.clock.to_json()
            clean = not any(c.is_closed() or c.is_in_transaction() for c in conns)
            undeclared = set(res.outcomes.values()) - set(sc.outcomes)
            if undeclared:
                raise ScenarioFailure(
                    f"{sc.id} / {variant}: undeclared outcome(s) {sorted(undeclared)} under "
                    f"schedule {', '.join(schedule)}"
                )
            env.outcomes = Counter(res.outcomes.values())
            await stop_observers(observed, env)
            res.checks = await sc.invariant(env) if sc.invariant else []
            res.evidence = dict(env.extra_evidence)
            for c in res.checks:
                seq.transcript.add("invariant", f"{c.name}: {c.detail}", _held(c.held))
            res.transcript = seq.transcript.text()
            return res
        finally:
            if observed:  # the run failed or was invalid: stop what watches it
                with contextlib.suppress(Exception):
                    await stop_observers(observed, env)
            if clean:  # every session's code ran to its end: no transaction left, reuse them
                self.keep(conns)
            else:
                await self.end_sessions(conns)

    def header(self, variant: str, name: str, isolation: str) -> str:
        # deadlock_timeout is not printed: it decides when a cycle is broken, not the
        # order; a transcript is the same at any value long enough for the schedule
        what = f"{self.scenario.id} / {variant}, {isolation.replace('_', ' ')}"
        return f"schedule {name}   ({what})"


def _held(held: bool) -> str:
    return "held" if held else "BROKEN"


@asynccontextmanager
async def pinned_lab(
    scenario: Scenario, servers: Servers, run_id: str, deadlock_ms: int, lane: str = ""
) -> AsyncIterator[PinnedLab]:
    """A fresh database (and Redis prefix) for one trace or explore, dropped afterwards."""
    lab = PinnedLab(scenario, servers, run_id, deadlock_ms, lane)
    admin = await admin_connect(servers)
    created = False
    try:
        await probe_pg(admin, servers)
        await admin.execute(f'CREATE DATABASE "{lab.database}"')
        created = True
        await admin.execute(
            f"ALTER DATABASE \"{lab.database}\" SET deadlock_timeout = '{int(deadlock_ms)}ms'"
        )
        assert servers.pg is not None
        lab.dsn = with_database(servers.pg.dsn, lab.database)
        lab.pool = await asyncpg.create_pool(lab.dsn, min_size=1, max_size=3)
        lab.watch = await watch_pool(lab.dsn)
        if "redis" in scenario.uses:
            lab.redis = await redis_client(servers, 16)
        yield lab
    finally:
        lab.terminate_all()
        for pool in (lab.pool, lab.watch):
            if pool is not None:
                pool.terminate()
        if lab.redis is not None:
            with contextlib.suppress(Exception):
                await lab.redis.aclose()
        if created:
            with contextlib.suppress(Exception):
                # the backends just closed, waited for until they are gone: DROP DATABASE
                # would otherwise find them still exiting and retry only after 100 ms
                await admin.execute(GONE, lab.database)
            with contextlib.suppress(Exception):
                await admin.execute(f'DROP DATABASE IF EXISTS "{lab.database}" WITH (FORCE)')
        with contextlib.suppress(Exception):
            await admin.close()


# --- trace -------------------------------------------------------------------------------


async def trace(
    scenario: Scenario,
    servers: Servers,
    runs: Sequence[tuple[str, str, tuple[str, ...]]],
    isolations: Sequence[str],
    *,
    run_id: str,
    deadlock_ms: int,
    on_result: Callable[[PinnedResult], None] | None = None,
) -> list[PinnedResult]:
    """Each (variant, schedule) at each isolation level, in order."""
    out = []
    async with pinned_lab(scenario, servers, run_id, deadlock_ms) as lab:
        for variant, name, steps in runs:
            for iso in isolations:
                res = await lab.run(variant, steps, isolation=iso, name=name)
                out.append(res)
                if on_result is not None:
                    on_result(res)
    return out


def trace_record(
    scenario: Scenario,
    servers: Servers,
    results: Sequence[PinnedResult],
    *,
    run_id: str,
    deadlock_ms: int,
) -> dict[str, Any]:
    """The trace's record: each run (variant, level, transcript, timing); `draw_svg` adds
    the file it drew them into."""
    return {
        "schema": SCHEMA_VERSION,
        "kind": "trace",
        "run_id": run_id,
        "scenario": scenario.id,
        "title": scenario.title,
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "deadlock_timeout_ms": deadlock_ms,
        "servers": {i.product: i.to_json() for i in servers.infos()},
        "lab": {
            "version": __version__,
            "git_commit": git_commit(),
            "python": platform.python_version(),
        },
        "svg": None,
        "runs": [{"variant": r.variant, "isolation": r.isolation, **r.to_json()} for r in results],
    }


def write_trace(record: Mapping[str, Any]) -> Path:
    path = results_root() / record["run_id"] / TRACE_DIR / f"{record['scenario']}.json"
    return write_json(path, record)


def drawn_of(record: Mapping[str, Any]) -> list[Picture]:
    """What a trace or explore record draws: every traced run; each explored cell's first
    failing schedule (else its first with an error). Runs without times draw nothing."""
    scenario = record.get("scenario")
    runs: list[tuple[str, Mapping[str, Any]]] = [
        (f"locklab trace {scenario}", run) for run in record.get("runs") or []
    ]
    for variant, entry in (record.get("variants") or {}).items():
        for iso, cell in (entry.get("by_isolation") or {}).items():
            first = cell.get("first_failing") or cell.get("first_error")
            why = "first failing" if cell.get("first_failing") else "first with an error"
            if first:
                runs.append((f"locklab explore {scenario}: {variant} at {iso}, {why}", first))
    return [p for caption, run in runs if (p := picture_of(run, caption)) is not None]


def drawn_runs(folder: Path) -> list[Picture]:
    """The pictures of the trace and explore records in a run's folder (for the report)."""
    paths = sorted((folder / TRACE_DIR).glob("*.json")) + sorted(
        (folder / EXPLORE_DIR).glob("*.json")
    )
    return [p for path in paths for p in drawn_of(read_record(path))]


def svg_target(spec: str) -> Path:
    """--svg FILE, checked before any server starts: a file in a folder that can be written."""
    path = Path(spec)
    if path.is_dir():
        raise LabError(f"--svg {spec}: is a folder; give a file name (out.svg)")
    folder = path.parent
    if not folder.is_dir():
        raise LabError(f"--svg {spec}: no folder {str(folder)!r}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise LabError(f"--svg {spec}: cannot write there")
    return path


def draw_svg(record: dict[str, Any], svg: Path) -> str:
    """Draw what `record` draws (drawn_of) into `svg` and note the file in the record;
    what to tell the user (an explore in which nothing failed draws nothing)."""
    pictures = drawn_of(record)
    if not pictures:
        return f"no picture: no schedule failed or raised an error, {svg} not written"
    record["svg"] = str(svg)
    return f"picture: {write_text(svg, document(pictures))}"


# --- explore -----------------------------------------------------------------------------


def _cell(results: Sequence[PinnedResult], total: int, invalid: int) -> dict[str, Any]:
    ran = [r for r in results if not r.invalid]
    broke = [r for r in ran if not r.kept]
    states = Counter(o for r in ran for o in r.outcomes.values() if o[:1].isdigit())
    first_broken = next((r for r in broke), None)
    first_error = next((r for r in ran if any(o[:1].isdigit() for o in r.outcomes.values())), None)
    return {
        "interleavings": total,
        "ran": len(ran),
        "invalid": invalid,
        "kept": len(ran) - len(broke),
        "broke": len(broke),
        "outcomes": dict(Counter(r.signature for r in ran).most_common()),
        "broke_by": dict(Counter(r.signature for r in broke).most_common()),
        # interleavings in which the server showed some step blocked, and which steps
        "waited": sum(1 for r in ran if r.waited),
        "waited_steps": dict(sorted(Counter(w for r in ran for w in r.waited).items())),
        "broken_invariants": dict(
            Counter(c.name for r in broke for c in r.checks if not c.held).most_common()
        ),
        # interleavings in which some session ended with this SQLSTATE
        "sqlstates": dict(
            sorted(
                Counter(o for r in ran for o in set(r.outcomes.values()) if o[:1].isdigit()).items()
            )
        ),
        "sqlstate_sessions": dict(sorted(states.items())),
        # interleavings in which some step raised this SQLSTATE, even if its session then
        # retried and ended well (money-transfer's deadlock loser)
        "step_sqlstates": dict(
            sorted(Counter(e for r in ran for e in set(STEP_ERROR.findall(r.transcript))).items())
        ),
        "first_failing": first_broken.to_json() if first_broken else None,
        "first_error": first_error.to_json() if first_error else None,
    }


async def explore(
    scenario: Scenario,
    servers: Servers,
    plan: Mapping[str, Sequence[str]],
    *,
    run_id: str,
    deadlock_ms: int,
    on_progress: Callable[[str], None] | None = None,
    lane: str = "",
) -> dict[str, Any]:
    """Every interleaving of each variant's declared steps at each of its isolation levels
    (`plan`: variant -> levels), and its canonical schedules; the explore record (see the
    module doc). `lane` names this explore's database apart from others of the same
    scenario running at the same time (see merge_explores)."""
    pinned = pinned_of(scenario)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    by_variant: dict[str, dict[str, Any]] = {}
    async with pinned_lab(scenario, servers, run_id, deadlock_ms, lane) as lab:
        for variant, levels in plan.items():
            # a cast may interleave fewer steps than its schedules name (lab/stage.py)
            steps = getattr(pinned, "explore_steps", {}).get(variant) or pinned.steps[variant]
            total = count_interleavings(steps)
            cells: dict[str, Any] = {}
            for iso in levels:
                if pinned.canonical_only:
                    cells[iso] = await _canonical_cell(lab, pinned, variant, iso)
                    if on_progress is not None:
                        on_progress(f"{scenario.id}: {variant} at {iso} done")
                    continue
                results: list[PinnedResult] = []
                dead: list[tuple[str, ...]] = []  # prefixes known to be invalid
                invalid = 0
                for sched in interleavings(steps):
                    if any(sched[: len(p)] == p for p in dead):
                        invalid += 1
                        continue
                    res = await lab.run(variant, sched, isolation=iso)
                    if res.invalid:
                        dead.append(sched[: res.invalid_at + 1])
                        invalid += 1
                    results.append(res)
                cell = _cell(results, total, invalid)
                cell["canonical"] = {
                    name: (await lab.run(variant, s, isolation=iso, name=name)).to_json()
                    for name, s in pinned.schedules.get(variant, {}).items()
                }
                cells[iso] = cell
                if on_progress is not None:
                    on_progress(f"{scenario.id}: {variant} at {iso} done")
            by_variant[variant] = {"variant": variant, "steps": dict(steps), "by_isolation": cells}
    levels_all = [x for x in ISOLATION_LEVELS if any(x in v for v in plan.values())]
    return {
        "schema": SCHEMA_VERSION,
        "kind": "explore",
        "run_id": run_id,
        "scenario": scenario.id,
        "title": scenario.title,
        "started_at": started,
        "deadlock_timeout_ms": deadlock_ms,
        "isolation": levels_all,
        "servers": {i.product: i.to_json() for i in servers.infos()},
        "lab": {"version": __version__, "git_commit": git_commit(), "python": platform.python_version()},
        "variants": by_variant,
    }  # fmt: skip


async def _canonical_cell(lab: PinnedLab, pinned: Pinned, variant: str, iso: str) -> dict[str, Any]:
    """A cell of a canonical-only explore: the canonical schedules are the runs counted."""
    runs = {
        name: await lab.run(variant, s, isolation=iso, name=name)
        for name, s in pinned.schedules.get(variant, {}).items()
    }
    cell = _cell(list(runs.values()), len(runs), 0)
    cell["canonical_only"] = True
    cell["canonical"] = {name: r.to_json() for name, r in runs.items()}
    return cell


def merge_explores(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One explore record from explores of the same scenario, each of some of its
    variants (run side by side): the variants in the parts' order, every level any ran."""
    merged = dict(parts[0])
    merged["variants"] = {v: cell for p in parts for v, cell in p["variants"].items()}
    merged["isolation"] = [x for x in ISOLATION_LEVELS if any(x in p["isolation"] for p in parts)]
    merged["started_at"] = min(str(p["started_at"]) for p in parts)
    return merged


def explore_path(run_id: str, scenario: str, root: Path | None = None) -> Path:
    return (root or results_root()) / run_id / EXPLORE_DIR / f"{scenario}.json"


def write_explore(record: Mapping[str, Any]) -> Path:
    return write_json(explore_path(record["run_id"], record["scenario"]), record)


# --- explore claims ----------------------------------------------------------------------
# Each check reads, for its variant, the cells of the isolation levels the claim names
# (`levels`); a level the record lacks leaves the claim not exercised, never held.

RC = "read_committed"


def _levels(rec: Record, levels: Sequence[str]) -> dict[str, Any] | None:
    cells = rec["by_isolation"]
    if any(lv not in cells for lv in levels):
        return None
    return {lv: cells[lv] for lv in levels}


def _explored(
    cid: str,
    variant: str,
    text: str,
    levels: Sequence[str],
    check: Callable[[dict[str, Any]], tuple[bool, str]],
    published: str = "",
) -> Claim:
    def judged(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        cells = _levels(records[variant], levels)
        if cells is None:
            return None
        held, seen = check(cells)
        return held, f"{variant}: {seen}"

    return Claim(cid, text, (variant,), judged, published, explore=True, levels=tuple(levels))


def kept_in_all(
    cid: str, variant: str, text: str, levels: Sequence[str] = (RC,), published: str = ""
) -> Claim:
    """`variant` keeps every invariant in every interleaving that ran, at each level.
    Its counterfactual is a mutation: the same cells with one interleaving broken."""

    def check(cells: dict[str, Any]) -> tuple[bool, str]:
        seen = "; ".join(f"{lv}: kept {c['kept']}/{c['ran']}" for lv, c in cells.items())
        return all(c["ran"] > 0 and c["broke"] == 0 for c in cells.values()), seen

    def one_broken(rec: Record) -> None:
        for lv in levels:
            cell = rec["by_isolation"].get(lv)
            if cell and cell.get("ran"):
                cell.update(kept=cell["kept"] - 1, broke=cell["broke"] + 1)
                return

    claim = _explored(cid, variant, text, levels, check, published)
    return replace(claim, counterfactual=mutation(variant, one_broken))


def broke_in_some(
    cid: str, variant: str, text: str, levels: Sequence[str] = (RC,), published: str = ""
) -> Claim:
    """`variant` breaks an invariant in at least one interleaving at each level."""

    def check(cells: dict[str, Any]) -> tuple[bool, str]:
        seen = "; ".join(
            f"{lv}: broke {c['broke']}/{c['ran']} {c['broken_invariants']}"
            for lv, c in cells.items()
        )
        return all(c["broke"] > 0 for c in cells.values()), seen

    return _explored(cid, variant, text, levels, check, published)


def waited_in(
    cid: str, variant: str, text: str, *, expect: bool, levels: Sequence[str] = (RC,), published: str = ""
) -> Claim:  # fmt: skip
    """At each level, the server showed some step blocked in some interleaving
    (expect=True), or in none."""

    def check(cells: dict[str, Any]) -> tuple[bool, str]:
        n = {lv: c.get("waited") for lv, c in cells.items()}
        seen = "; ".join(f"{lv}: a step waited in {k}/{cells[lv]['ran']}" for lv, k in n.items())
        ran = all(c["ran"] > 0 and c.get("waited") is not None for c in cells.values())
        return ran and all(((k or 0) > 0) == expect for k in n.values()), seen

    return _explored(cid, variant, text, levels, check, published)


def error_in(
    cid: str,
    variant: str,
    sqlstate: str,
    text: str,
    *,
    expect: bool,
    levels: Sequence[str] = (RC,),
    published: str = "",
) -> Claim:
    """At each level, some interleaving ends with `sqlstate` (expect=True) or none does."""

    def check(cells: dict[str, Any]) -> tuple[bool, str]:
        n = {lv: c["sqlstates"].get(sqlstate, 0) for lv, c in cells.items()}
        seen = "; ".join(f"{lv}: {sqlstate} in {k}/{cells[lv]['ran']}" for lv, k in n.items())
        ran = all(c["ran"] > 0 for c in cells.values())
        return ran and all((k > 0) == expect for k in n.values()), seen

    return _explored(cid, variant, text, levels, check, published)


def canonical(
    cid: str,
    variant: str,
    schedule: str,
    text: str,
    *,
    outcomes: Mapping[str, str] | Sequence[str],
    waited: Sequence[str] = (),
    kept: bool,
    isolation: str = RC,
    published: str = "",
) -> Claim:
    """The canonical `schedule` of `variant` at `isolation` ends with `outcomes` per
    session (a mapping), or with these words in any session (a sequence: which cart the
    deadlock detector picks depends on timing), the server showed the `waited` steps
    blocked, and the invariants held (kept=True) or one broke."""

    def check(cells: dict[str, Any]) -> tuple[bool, str]:
        run = cells[isolation]["canonical"].get(schedule)
        if run is None:
            return False, f"no canonical schedule {schedule!r} in the record"
        got = " ".join(f"{s}={o}" for s, o in run["outcomes"].items())
        inv = "held" if run["kept"] else "BROKEN"
        seen = f"{schedule} at {isolation}: {got}; waited: {', '.join(run['waited']) or 'none'}; invariants {inv}"
        words = (
            run["outcomes"] == dict(outcomes)
            if isinstance(outcomes, Mapping)
            else sorted(run["outcomes"].values()) == sorted(outcomes)
        )
        held = words and all(w in run["waited"] for w in waited) and run["kept"] == kept
        return held, seen

    return _explored(cid, variant, text, (isolation,), check, published)


def on_canonical(
    cid: str,
    variant: str,
    schedule: str,
    text: str,
    check: Callable[[dict[str, Any]], tuple[bool, str]],
    *,
    isolation: str = RC,
    published: str = "",
) -> Claim:
    """A claim judged by `check` on the run of `variant`'s canonical `schedule` at
    `isolation` (its JSON: outcomes, waited, kept, transcript), for what `canonical`
    does not say (nobody waited, either session may be the victim, the rows returned)."""

    def judged(cells: dict[str, Any]) -> tuple[bool, str]:
        run = cells[isolation]["canonical"].get(schedule)
        if run is None:
            return False, f"no canonical schedule {schedule!r} in the record"
        return check(run)

    return _explored(cid, variant, text, (isolation,), judged, published)


def nobody_waited(
    cid: str, variant: str, schedule: str, text: str, *, ends: Sequence[str], published: str = ""
) -> Claim:
    """In `variant`'s canonical `schedule` the server showed no step blocked, every session
    ended with one of `ends` and the invariants held."""

    def check(run: dict[str, Any]) -> tuple[bool, str]:
        got = " ".join(f"{s}={o}" for s, o in run["outcomes"].items())
        seen = f"{schedule}: {got}; waited: {', '.join(run['waited']) or 'none'}"
        done = all(o in ends for o in run["outcomes"].values())
        return not run["waited"] and done and run["kept"], seen

    return on_canonical(cid, variant, schedule, text, check, published=published)
