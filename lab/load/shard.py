"""--procs K: the actors of one variant run over K worker processes, released together.

Where the client is the bottleneck (5,000 waiters polling Redis), one Python event loop
is the limit, not the servers. A sharded run starts K workers (`python -m lab.load.shard`),
each with its own event loop and its own connections, and talks to each over one JSON
line per message on its stdin/stdout:

    lab -> worker   {"config": ...}            scenario, variant, knobs, params, its actors
    worker -> lab   {"ready": pid}             connections open, worker_setup done
    lab -> worker   {"go": t, "pids": [...]}   once every worker is ready: the shared start
                                               instant (time.monotonic(), one clock for every
                                               process of the machine) and the lab's PIDs
    worker -> lab   {"result": ...}            outcomes, latencies, counters, samples,
                                               evidence, trace, CPU, peak memory
    worker -> lab   {"error": "one line"}      the scenario failed there (ScenarioFailure)

Actors are dealt round robin (actor i to worker i mod K) and every actor keeps its offset
in the whole run's arrival (`start_offsets` computed once, here), so burst, stagger and
poisson mean what they mean in one process. Results merge into the lab's Env: outcomes,
latencies, counters and samples add up (counters named ``max_*`` take the maximum),
evidence lists concatenate and other evidence keys keep the first worker's value, trace
events interleave by time.

Workers die with the lab: each asks the kernel for SIGKILL when its parent ends
(PR_SET_PDEATHSIG) and checks that the parent is still the one that started it. A
worker that dies fails the run with one line naming it, and the lab kills the others by
PID and waits for them, so nothing is left running.

Beyond one machine: the protocol carries everything a worker needs (server URLs, the
run's prefix and database, its actors and the start instant), so workers on other hosts
could be started over ssh with the same two messages; what would change is the clock
(time.monotonic() is per machine: the start would need wall-clock time synchronised by
NTP/PTP, to the millisecond at best) and CPU accounting (/proc of remote PIDs).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lab.aio import within
from lab.core.knobs import Knobs
from lab.core.scenario import Env, Scenario
from lab.errors import LabError, ScenarioFailure
from lab.load.workload import ActorsResult, run_actors
from lab.procs import die_with_parent
from lab.procs.procstat import peak_rss_mb

if TYPE_CHECKING:
    from lab.procs.forkserver import Forked

READY_TIMEOUT_S = 120.0  # a worker opens its connections in this time, or the run fails
START_AHEAD_S = 0.05  # the start instant sent with "go" lies this far ahead
EXIT_GRACE_S = 5.0
LINE_LIMIT = 2**26  # a worker's result is one JSON line


def resolve_procs(scenario: Scenario, knobs: Knobs) -> int:
    """K: --procs when given; else one worker per `actors_per_process` actors, at most
    `procs_per_core` per core (a client-bound scenario), else 1 (the lab's process)."""
    if knobs.procs >= 1:
        return min(knobs.procs, knobs.n)
    if scenario.kind != "actors" or scenario.actors_per_process < 1:
        return 1
    most = (os.cpu_count() or 1) * max(1, scenario.procs_per_core)
    return max(1, min(most, math.ceil(knobs.n / scenario.actors_per_process)))


def deal(n: int, k: int) -> list[list[int]]:
    """Actor indices per worker: round robin, so every worker sees the whole arrival."""
    return [list(range(w, n, k)) for w in range(k)]


def merge_into(env: Env, results: Sequence[Mapping[str, Any]]) -> ActorsResult:
    """Fold the workers' results into the lab's Env; return the actors' merged result."""
    outcomes: Counter[str] = Counter()
    latencies: dict[str, list[float]] = {}
    for r in results:
        outcomes.update(r["outcomes"])
        for k, v in r["latencies_ms"].items():
            latencies.setdefault(k, []).extend(v)
        for k, v in r["counters"].items():
            env.counters[k] = (
                max(env.counters[k], v) if k.startswith("max_") else env.counters[k] + v
            )
        for k, v in r["samples"].items():
            env.samples.setdefault(k, []).extend(v)
        for k, v in r["evidence"].items():
            if isinstance(v, list):
                env.extra_evidence.setdefault(k, []).extend(v)
            else:
                env.extra_evidence.setdefault(k, v)
        env.events.extend(r["events"])
    env.events.sort(key=lambda e: e["t_ms"])
    wall_ms = max((r["wall_ms"] for r in results), default=0.0)
    return ActorsResult(outcomes, wall_ms, latencies)


async def _start(module: str) -> tuple[asyncio.subprocess.Process | Forked, int]:
    """A worker process, and the PID its death signal follows: forked by the fork server
    (lab/procs/forkserver.py) with the lab's modules and the scenario's imported there, or, when
    that is off or fails, a fresh ``python -m lab.load.shard`` (the lab's PID)."""
    from lab.procs import forkserver

    if forkserver.enabled():
        preload = ("lab.load.shard", "lab.load.runner", "uvloop", module)
        with contextlib.suppress(OSError):
            return await forkserver.start(
                "lab.load.shard", os.getcwd(), preload, LINE_LIMIT, module=True
            )
        forkserver.fallbacks += 1
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "lab.load.shard",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=LINE_LIMIT,
    )
    return proc, os.getpid()


class _Worker:
    def __init__(self, index: int, proc: asyncio.subprocess.Process | Forked) -> None:
        self.index = index
        self.proc = proc
        self.stderr_tail: list[str] = []

    async def read(self, what: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            code = await self.proc.wait()
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            tail = f": {self.stderr_tail[-1]}" if self.stderr_tail else ""
            raise ScenarioFailure(
                f"worker {self.index} (pid {self.proc.pid}) died with {how} before {what}{tail}"
            )
        msg: dict[str, Any] = json.loads(line)
        if "error" in msg:
            raise ScenarioFailure(f"worker {self.index} (pid {self.proc.pid}): {msg['error']}")
        return msg

    def send(self, msg: Mapping[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())

    async def drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            text = raw.decode(errors="replace").strip()
            if text:
                self.stderr_tail = [*self.stderr_tail[-20:], text]


async def run_sharded(
    env: Env, scenario: Scenario, variant: str, knobs: Knobs, procs: int, *, uses_pg: bool
) -> tuple[ActorsResult, dict[str, Any]]:
    """Run `variant`'s actors over `procs` workers; (merged result, the workers' facts)."""
    env_fields = {
        "dsn": env.dsn,
        "database": env.database,
        "prefix": env.prefix,
        "redis_url": env.redis_url,
        "actors_redis_url": env.actors_redis_url,
        "pgbouncer": env.pgbouncer,
    }
    module = scenario.code(variant).__module__
    workers: list[_Worker] = []
    drains: list[asyncio.Task[None]] = []
    try:
        for index, mine in enumerate(deal(knobs.n, procs)):
            proc, parent = await _start(module)
            worker = _Worker(index, proc)
            workers.append(worker)
            drains.append(asyncio.create_task(worker.drain_stderr()))
            worker.send(
                {
                    "config": {
                        "module": module,
                        "scenario": scenario.id,
                        "variant": variant,
                        "knobs": knobs.to_json(),
                        "params": dict(env.params),
                        "env": env_fields,
                        "indices": mine,
                        "worker": index,
                        "uses_pg": uses_pg,
                        "parent": parent,
                    }
                }
            )
        ready = [
            asyncio.ensure_future(within(w.read("it was ready"), READY_TIMEOUT_S)) for w in workers
        ]
        await _all_or_first_error(ready)
        pids = [os.getpid(), *(w.proc.pid for w in workers)]
        env.lab_pids = pids
        go = time.monotonic() + START_AHEAD_S
        for w in workers:
            w.send({"go": go, "pids": pids})
        # the lab's clock starts where the workers' do: what its observers stamp with
        # env.now_ms() lines up with the trace events the workers send back
        env.t0 = time.perf_counter() + (go - time.monotonic())
        limit = knobs.run_timeout_s + READY_TIMEOUT_S
        done = [asyncio.ensure_future(within(w.read("it sent its result"), limit)) for w in workers]
        results = [m["result"] for m in await _all_or_first_error(done)]
        for w in workers:
            with contextlib.suppress(TimeoutError):
                await within(w.proc.wait(), EXIT_GRACE_S)
    except TimeoutError:
        raise ScenarioFailure(
            f"{env.scenario} / {variant}: a worker process did not answer"
        ) from None
    except ScenarioFailure as exc:
        raise ScenarioFailure(f"{env.scenario} / {variant}: {exc}") from None
    finally:
        for w in workers:  # whatever happened: none outlives the run
            if w.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    w.proc.kill()
                await w.proc.wait()
        for d in drains:
            d.cancel()
        await asyncio.gather(*drains, return_exceptions=True)
    merged = merge_into(env, results)
    facts = {
        "workers": [
            {k: r[k] for k in ("pid", "actors", "cpu_s", "peak_rss_mb", "loop")} for r in results
        ]
    }
    return merged, facts


async def _all_or_first_error(
    futs: Sequence[asyncio.Future[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Every future's result in order, or the first error (the others are cancelled)."""
    try:
        await asyncio.wait(futs, return_when=asyncio.FIRST_EXCEPTION)
        for f in futs:
            if f.done() and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
        return [f.result() for f in futs]
    finally:
        for f in futs:
            f.cancel()
        await asyncio.gather(*futs, return_exceptions=True)


# --- the worker side ----------------------------------------------------------------------


def _find_scenario(module: str, scenario_id: str) -> Scenario:
    """The scenario whose variants are in `module`: there, or in a package above it (a
    folder-shaped scenario's code file has no SCENARIO; its package re-exports it)."""
    parts = module.split(".")
    for depth in range(len(parts), 0, -1):
        mod = importlib.import_module(".".join(parts[:depth]))
        for value in vars(mod).values():
            if isinstance(value, Scenario) and value.id == scenario_id:
                return value
    raise LabError(f"module {module} has no scenario {scenario_id!r}")


async def _worker(cfg: dict[str, Any], out: Any) -> None:
    """A worker's run: its Redis and Env, its actors released with the others, its result."""
    from lab.load.redisclients import open_redis

    scenario = _find_scenario(cfg["module"], cfg["scenario"])
    knobs = Knobs(**cfg["knobs"])
    indices: list[int] = cfg["indices"]
    rclient: Any = None
    commands: Any = None
    if "redis" in scenario.uses:
        rclient, commands = await open_redis(
            cfg["env"]["actors_redis_url"], knobs.redis_client, len(indices)
        )
    env = _worker_env(cfg, scenario, knobs, rclient)
    env.commands = commands
    loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
    try:
        if scenario.worker_setup is not None:
            await scenario.worker_setup(env)
        released = await _released_by_lab(env, out)
        cpu0 = time.process_time()
        res = await run_actors(
            env,
            scenario.code(cfg["variant"]),
            knobs,
            uses_pg=cfg["uses_pg"],
            indices=indices,
            released=released,
        )
        if scenario.worker_done is not None:
            await scenario.worker_done(env)
        _send(out, {"result": _result(env, res, len(indices), cpu0, loop_name)})
    finally:
        await _close_worker(env, rclient, commands)


def _send(out: Any, msg: Mapping[str, Any]) -> None:
    """Write one protocol message to the lab, a JSON line on `out`."""
    out.write(json.dumps(msg, default=str) + "\n")
    out.flush()


def _worker_env(cfg: dict[str, Any], scenario: Scenario, knobs: Knobs, rclient: Any) -> Env:
    """The worker's Env: the lab's database, prefix and URLs, with the worker's own Redis."""
    e = cfg["env"]
    return Env(
        scenario=scenario.id,
        variant=cfg["variant"],
        dsn=e["dsn"],
        database=e["database"],
        db=None,
        redis=rclient,
        prefix=e["prefix"],
        params=cfg["params"],
        seed=knobs.seed,
        n=knobs.n,
        redis_url=e["redis_url"],
        pgbouncer=e["pgbouncer"],
        actors_redis_url=e["actors_redis_url"],
    )


async def _released_by_lab(env: Env, out: Any) -> Callable[[], Awaitable[float]]:
    """The actors' release: say ready to the lab, then read its start instant and PIDs."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def released() -> float:
        _send(out, {"ready": os.getpid()})
        line = await reader.readline()
        if not line:
            raise ScenarioFailure("the lab went away before the start")
        go = json.loads(line)
        env.lab_pids = list(go["pids"])
        return float(go["go"])

    return released


def _result(
    env: Env, res: ActorsResult, actors: int, cpu0: float, loop_name: str
) -> dict[str, Any]:
    """The worker's result message: its actors' outcomes and what it measured and used."""
    return {
        "pid": os.getpid(),
        "actors": actors,
        "outcomes": {k: v for k, v in res.outcomes.items() if v},
        "latencies_ms": res.latencies_ms,
        "wall_ms": res.wall_ms,
        "counters": dict(env.counters),
        "samples": env.samples,
        "evidence": env.extra_evidence,
        "events": env.events,
        "cpu_s": round(time.process_time() - cpu0, 3),
        "peak_rss_mb": round(peak_rss_mb(os.getpid()), 1),
        "loop": loop_name,
    }


async def _close_worker(env: Env, rclient: Any, commands: Any) -> None:
    """Terminate the scenario's leftover connections; close the pipeline and Redis client."""
    for conn in env.connections:
        if not conn.is_closed():
            conn.terminate()
    if commands is not None:
        await commands.aclose()
    if rclient is not None:
        with contextlib.suppress(Exception):
            await rclient.aclose()


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # the protocol owns stdout; stray prints go to stderr
    first = sys.stdin.readline()
    if not first:
        return
    cfg = json.loads(first)["config"]
    die_with_parent(int(cfg["parent"]), code=1)
    try:
        import uvloop  # measurably faster for the client-bound loop (docs/load.md)

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        runner(_worker(cfg, out))
    except (ScenarioFailure, LabError) as exc:
        out.write(json.dumps({"error": str(exc)}) + "\n")
        out.flush()
        sys.exit(3)
    except Exception as exc:
        out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        out.flush()
        sys.exit(3)


if __name__ == "__main__":
    main()
