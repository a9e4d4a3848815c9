"""What `locklab bench` prints: both sides, the ratio, each side's CPU; the scale curve."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console

CURVE_WIDTH = 40  # characters of the bar at the largest ratio shown


def print_bench(console: Console, what: str, scale: bool, data: Mapping[str, Any]) -> None:
    if what == "redis":
        _redis(console, data)
    elif scale:
        _scale(console, data)
    else:
        _checkout(console, data)


def _line(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _checkout(console: Console, d: Mapping[str, Any]) -> None:
    _line(console, f"lab      {', '.join(f'{x:.0f}' for x in d['lab_ms'])} ms")
    _line(
        console, f"pgbench  {', '.join(f'{x:.0f}' for x in d['pgbench_ms'])} ms  ({d['pgbench']})"
    )
    verdict = "within" if d["ratio"] <= d["target_ratio"] else "ABOVE"
    _line(
        console,
        f"ratio lab/pgbench (medians) = {d['ratio']:.2f}  ({verdict} the {d['target_ratio']}x target)",
    )


def scale_curve(points: list[Mapping[str, Any]]) -> list[str]:
    """One line per n: the ratio as a bar against 1.0 and its target."""
    top = max([p["ratio"] for p in points] + [p["target_ratio"] for p in points] + [1.0])
    lines = []
    for p in points:
        bar = "#" * max(1, round(p["ratio"] / top * CURVE_WIDTH))
        mark = "ok" if p["ratio"] <= p["target_ratio"] else "ABOVE"
        lines.append(
            f"n={p['n']:>5} {p['via']:<22} lab {p['lab_median_ms']:>8.0f} ms  "
            f"pgbench {p['pgbench_median_ms']:>8.0f} ms  {p['ratio']:.3f} "
            f"{bar:<{CURVE_WIDTH}} <= {p['target_ratio']:.2f} {mark}"
        )
    return lines


def _scale(console: Console, d: Mapping[str, Any]) -> None:
    _line(console, f"fixed checkout, lab / pgbench (medians of {d['rounds']}), {d['pgbench']}")
    for line in scale_curve(d["points"]):
        _line(console, line)


def _redis(console: Console, d: Mapping[str, Any]) -> None:
    lab, ref, load = d["lab"], d["redis_benchmark"], d["load"]
    workers = load["workers"]
    _line(
        console,
        f"lab             buggy stampede n={d['n']}, rebuild {d['rebuild_ms']:.0f} ms, "
        f"{load['procs']} process(es) ({', '.join(w['loop'] for w in workers)}), "
        f"{load['redis_client']} client: Redis counted {lab['get_per_s']} GET/s over "
        f"{lab['window_ms']:.0f} ms; lab CPU {lab['client_cpu_per_s']:.2f} s/s, redis-server "
        f"CPU {lab['redis_cpu_per_s']:.2f} s/s; lab peak memory {lab['peak_rss_mb']:.0f} MiB",
    )
    _line(
        console,
        f"redis-benchmark -t get -c {ref['clients']} -n {ref['requests']}: Redis counted "
        f"{ref['get_per_s']} GET/s over the {ref.get('sending_s', 0):.1f} s it sent "
        f"({ref.get('get_per_s_wall', '?')} over its {ref['seconds']:.1f} s with connecting; "
        f"its own figure {ref['own_get_per_s']}); redis-benchmark CPU "
        f"{ref['client_cpu_per_s']:.2f} s/s, redis-server CPU {ref['redis_cpu_per_s']:.2f} s/s",
    )
    verdict = "met" if d["ratio"] >= d["target_ratio"] else "BELOW"
    _line(
        console,
        f"ratio lab/redis-benchmark = {d['ratio']:.2f}  ({verdict} the {d['target_ratio']}x "
        f"target); demand {d['demand_get_per_s']} GET/s, {d['demand_share']:.0%} of it made; "
        f"limit: {lab['limit']}",
    )
