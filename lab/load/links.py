"""--rtt on Redis and on PgBouncer's hop: the delayed links a variant opens before its clients.

The actors' own PostgreSQL connections get their delay proxy in lab.load.workload, in every
process that runs actors. Redis and PgBouncer need theirs before any client is opened, so
the runner opens them here, in the lab's process, once per variant (a sharded run's
workers are handed the URLs):

- `redis:<ms>`: one delay proxy (lab/procs/netdelay.py) in front of the run's Redis. The actors'
  clients connect through it: the pooled client behind `env.redis` (which the scenario's
  setup uses too, before the clock), the pipelined `env.commands`, and a worker process's
  own (`env.actors_redis_url`). The lab's own client (INFO, commandstats, the key cleanup)
  and whatever opens its own connection on `env.redis_url` (the samplers,
  redis-benchmark) go direct, so the evidence is not delayed.
- `pg:<ms>` with `--connect pgbouncer-*`: a PgBouncer of the variant's own whose
  `[databases]` line points at a delay proxy in front of PostgreSQL: every statement it
  forwards pays the RTT on its server hop, the actors reach it on loopback. Its own, not
  the lab's PgBouncer re-pointed: that one is a server of the whole command (compare and
  verify share it between plans whose knobs differ), a fresh one holds no server
  connection opened before the delay, and the lab's one, undelayed, measures the same
  hop without it.

`measure` times RTT_PROBES round trips each way before the clock (PING through the actors'
Redis client and the lab's own; SELECT 1 through both PgBouncers); the runner records
them in `evidence.network`, beside the PostgreSQL fields lab.load.workload writes. `close`
stops every process by PID (the proxies also die with the lab, PR_SET_PDEATHSIG; the
PgBouncer lives in a lab folder the reaper watches).

Scripts are not delayed: their sessions and worker processes open their own connections.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from lab.core.knobs import PGBOUNCER_MODES, Knobs
from lab.core.scenario import Env, Scenario
from lab.errors import LabError
from lab.load.workload import RTT_PROBES, round_trips, start_proxy, via_port
from lab.procs.netdelay import parse_rtt
from lab.servers import Servers, extra_pgbouncer
from lab.servers.base import with_database

REDIS_PORT = 6379


@dataclass
class Links:
    """Where one variant's actors reach Redis and PgBouncer, and how to stop what that took."""

    redis_url: str = ""  # the actors' Redis (the proxy's port when delayed); holds secrets
    pgbouncer: dict[str, str] = field(default_factory=dict)  # pool mode -> the actors' DSN
    lab_pgbouncer: dict[str, str] = field(default_factory=dict)  # the lab's own, undelayed
    redis_ms: float = 0.0  # the RTT asked per link, 0: direct
    pgbouncer_ms: float = 0.0
    stops: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        """Stop, in reverse order, every process these links started; never raises."""
        while self.stops:
            stop = self.stops.pop()
            with contextlib.suppress(Exception):
                stop()

    async def measure(self, env: Env, own_redis: Any, knobs: Knobs) -> dict[str, Any]:
        """The delayed links' round trips, through them and bypassing them (before the clock)."""
        out: dict[str, Any] = {}
        if self.redis_ms:
            actors: Any = env.cmd  # the pipelined client, else the pooled one
            ping = (lambda: actors.execute("PING")) if env.commands is not None else actors.ping
            out["redis"] = {
                "rtt_ms_asked": self.redis_ms,
                "proxy": "lab.procs.netdelay process, half the RTT each way",
                "probe": f"{RTT_PROBES} x PING before the clock started",
                "actors_rtt_ms": await round_trips(ping),
                "bypass_rtt_ms": await round_trips(own_redis.ping),
                "paid_by": f"the actors' Redis client (--redis-client {knobs.redis_client}) "
                "and the scenario's setup",
                "bypassed_by": "the lab's own client (INFO, commandstats, cleanup), its samplers",
            }
        if self.pgbouncer_ms:
            mode = PGBOUNCER_MODES[knobs.connect]
            out["pgbouncer"] = {
                "rtt_ms_asked": self.pgbouncer_ms,
                "hop": "PgBouncer (the variant's own) -> lab.procs.netdelay process -> PostgreSQL",
                "probe": f"{RTT_PROBES} x SELECT 1 through PgBouncer before the clock started",
                "actors_rtt_ms": await _through(env, self.pgbouncer[mode]),
                "bypass_rtt_ms": await _through(env, self.lab_pgbouncer[mode]),
                "bypassed_by": "the lab's own PgBouncer, in front of PostgreSQL directly",
            }
        return out


async def _through(env: Env, dsn: str) -> dict[str, float]:
    """SELECT 1 round trips on a connection of its own to the run's database at `dsn`."""
    conn = await asyncpg.connect(with_database(dsn, env.database), statement_cache_size=0)
    try:
        return await round_trips(lambda: conn.fetchval("SELECT 1"))
    finally:
        await conn.close()


def open_links(servers: Servers, scenario: Scenario, knobs: Knobs) -> Links:
    """The links of one variant of `scenario` under `knobs`: direct unless --rtt asks."""
    rtt = parse_rtt(knobs.rtt)
    links = Links(
        redis_url=servers.redis.url if servers.redis is not None else "",
        pgbouncer=dict(servers.pgbouncer),
        lab_pgbouncer=dict(servers.pgbouncer),
    )
    if scenario.kind != "actors":
        return links
    try:
        if rtt.get("redis") and "redis" in scenario.uses and servers.redis is not None:
            proxy = start_proxy(servers.redis.url, rtt["redis"], REDIS_PORT)
            links.stops.append(proxy.stop)
            links.redis_url = via_port(servers.redis.url, proxy.port)
            links.redis_ms = rtt["redis"]
        mode = PGBOUNCER_MODES.get(knobs.connect)
        if rtt.get("pg") and mode and "pg" in scenario.uses and servers.pg is not None:
            info = servers.pgbouncer_info
            if info is None or info.kind != "embedded":
                raise LabError(
                    f"--rtt pg with --connect {knobs.connect}: delays the hop of a PgBouncer "
                    "the lab starts, not one of LOCKLAB_PGBOUNCER_DSN's"
                )
            proxy = start_proxy(servers.pg.dsn, rtt["pg"])
            links.stops.append(proxy.stop)
            dsn, stop = extra_pgbouncer(servers, mode, proxy.port)
            links.stops.append(stop)
            links.pgbouncer[mode] = dsn
            links.pgbouncer_ms = rtt["pg"]
    except BaseException:
        links.close()
        raise
    return links
