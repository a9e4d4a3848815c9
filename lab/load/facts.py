"""What a record says about how a variant ran: the machine over its window (run delay, busy
cores), the processes and client the actors ran on, a summary of each sample."""

from __future__ import annotations

import os
import time
from typing import Any

from lab.core.knobs import Knobs
from lab.load.workload import percentiles


def machine_window(start: tuple[float, ...] | None = None) -> Any:
    """What the machine did to a variant's window: called with nothing, a snapshot; with
    the snapshot, over the time since it: how long the lab's event loop was runnable but
    not running (the kernel's run delay, /proc/self/schedstat) and how busy the cores
    were (/proc/stat). Claims about time read it (lab.core.claims.machine_cause)."""
    from lab.procs.procstat import machine_cpu, run_delay_s

    # the wall clock against the monotonic one: Redis's expiries and PostgreSQL's now()
    # run on the wall clock, the lab's times on the monotonic one
    wall = time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_MONOTONIC)
    now = (time.perf_counter(), run_delay_s(), *machine_cpu(), wall)
    if start is None:
        return now
    window_s = max(now[0] - start[0], 1e-6)
    waited_s = now[1] - start[1]
    busy, total = now[2] - start[2], now[3] - start[3]
    return {
        "window_ms": round(window_s * 1000, 1),
        "lab_cpu_wait_ms": round(waited_s * 1000, 1),
        "lab_cpu_wait_share": round(waited_s / window_s, 3),
        "cores_busy": round(busy / total, 3) if total > 0 else None,
        "wall_clock_step_ms": round((now[4] - start[4]) * 1000, 3),
    }


def load_facts(knobs: Knobs, procs: int, cpu_s: float, sharded: dict[str, Any]) -> dict[str, Any]:
    """How the actors were run: processes, Redis client, event loop, CPU and peak memory."""
    import asyncio as _asyncio

    from lab.procs.procstat import peak_rss_mb

    me = os.getpid()
    workers = sharded.get("workers") or [
        {
            "pid": me,
            "actors": knobs.n,
            "cpu_s": round(cpu_s, 3),
            "peak_rss_mb": round(peak_rss_mb(me), 1),
            "loop": type(_asyncio.get_running_loop()).__module__.split(".")[0],
        }
    ]
    lab_rss = peak_rss_mb(me) + (sum(w["peak_rss_mb"] for w in workers) if procs > 1 else 0)
    return {
        "procs": procs,
        "procs_asked": knobs.procs or "auto",
        "redis_client": knobs.redis_client,
        "workers": workers,
        "lab_peak_rss_mb": round(lab_rss, 1),
    }


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"count": len(values), "sum": round(sum(values), 3), **percentiles(values)}
