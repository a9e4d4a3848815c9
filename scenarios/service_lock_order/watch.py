"""service-lock-order: the lab's watch over the two services, until both are done or frozen.

A freeze is a wait-for cycle (each service waits for a key the other holds, read from
Redis and from the services' own `waiting` reports) that stays unchanged for the
`freeze_window_ms` param while both processes are alive and still sending SETs. What
the lab saw then goes on `env.extra_evidence["freeze"]`, and both are killed by PID.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lab.aio import until
from lab.core.scenario import Env
from lab.procs.workers import Event, Worker, proc_state

OBSERVE_MS = 10  # how often the lab reads both keys
GIVE_UP_S = 20.0  # neither done nor frozen by then: the run fails, named
STATES = ("waiting", "holding", "working", "done")


def last(w: Worker, name: str) -> Event | None:
    """The service's latest event called `name`."""
    return next((e for e in reversed(w.events) if e.name == name), None)


def state(w: Worker) -> str:
    """The service's latest step: waiting, holding, working or done."""
    return next((e.name for e in reversed(w.events) if e.name in STATES), "")


async def snapshot(env: Env, workers: Sequence[Worker]) -> dict[str, Any]:
    stats = await env.redis.info("commandstats")
    return {
        "tries": {
            w.name: (ev.fields["tries"] if (ev := last(w, "waiting")) else 0) for w in workers
        },
        "set_calls": int(stats.get("cmdstat_set", {}).get("calls", 0)),
        "state": {w.name: proc_state(w.pid) for w in workers},
    }


async def watch(
    env: Env, workers: Sequence[Worker], keys: Sequence[str], owners: Mapping[str, str]
) -> None:
    """Until both are done, or a wait-for cycle has stood still for the freeze window;
    `owners` names the service of each token."""
    names = [env.key(k) for k in keys]
    window = env.params["freeze_window_ms"]
    cycle_seen: dict[str, Any] = {}  # since (ms) and the snapshot then, while a cycle stands

    async def done_or_frozen() -> str:
        if all(last(w, "done") for w in workers):
            return "done"
        values = [v.decode() if isinstance(v, bytes) else v for v in await env.redis.mget(names)]
        holders = {k: owners.get(v, "?") if v else None for k, v in zip(names, values, strict=True)}
        waits = {
            w.name: ev.fields["key"]
            for w in workers
            if state(w) == "waiting" and (ev := last(w, "waiting"))
        }
        if not (len(waits) == 2 and all(holders[k] not in (None, w) for w, k in waits.items())):
            cycle_seen.clear()
            return ""
        if not cycle_seen:
            cycle_seen.update(since=env.now_ms(), start=await snapshot(env, workers))
            return ""
        if env.now_ms() - cycle_seen["since"] < window:
            return ""
        start, end = cycle_seen["start"], await snapshot(env, workers)
        env.extra_evidence["freeze"] = {
            "holders": {k.removeprefix(env.prefix): h for k, h in holders.items()},
            "waits_for": {w: k.removeprefix(env.prefix) for w, k in waits.items()},
            "cycle": [
                f"{w} waits for {k.removeprefix(env.prefix)}, held by {holders[k]}"
                for w, k in waits.items()
            ],
            "window_ms": round(env.now_ms() - cycle_seen["since"], 1),
            "tries": {n: [start["tries"][n], end["tries"][n]] for n in end["tries"]},
            "redis_set_calls": end["set_calls"] - start["set_calls"],
            "process_state": end["state"],
        }
        return "frozen"

    what = f"{env.scenario} / {env.variant}: done or frozen"
    end = await until(done_or_frozen, window / 1000 + GIVE_UP_S, what, every=OBSERVE_MS / 1000)
    if end == "frozen":
        env.trace(
            "lab",
            "frozen: killing both by PID",
            window_ms=env.extra_evidence["freeze"]["window_ms"],
        )
        for w in workers:
            await w.close()
    for _ in workers:
        env.outcome(end)
