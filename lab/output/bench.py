"""What `locklab bench` prints: both sides, the ratio, each side's CPU; the scale curve."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console

CURVE_WIDTH = 40  # characters of the bar at the largest ratio shown


def print_bench(console: Console, what: str, scale: bool, data: Mapping[str, Any]) -> None:
    if what == "gate":
        _gate(console, data)
    elif what == "isolation":
        _isolation(console, data)
    elif what == "redis":
        _redis(console, data)
    elif scale:
        _scale(console, data)
    else:
        _checkout(console, data)


def _line(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _gate(console: Console, d: Mapping[str, Any]) -> None:
    """TPS medians per script and clients: direct, PgBouncer, the gate, gate / PgBouncer."""
    _line(console, f"{d['rounds']} rounds of {d['seconds']} s each, interleaved ({d['pgbench']})")
    _line(
        console,
        f"{'script':12} {'clients':>7} {'direct':>9} {'pgbouncer':>9} {'gate':>9}  gate/pgbouncer",
    )
    for row in d["rows"]:
        tps = {r: (row[r] or {}).get("tps") for r in ("direct", "pgbouncer", "gate")}
        shown = {r: "-" if v is None else f"{v:.0f}" for r, v in tps.items()}
        ratio = "-"
        if tps["gate"] and tps["pgbouncer"]:
            ratio = f"{tps['gate'] / tps['pgbouncer']:.2f}"
        _line(
            console,
            f"{row['script']:12} {row['clients']:>7} {shown['direct']:>9} "
            f"{shown['pgbouncer']:>9} {shown['gate']:>9}  {ratio}",
        )
    for script, added in d["added_us_per_statement"].items():
        parts = [f"{r} {v:+.0f} us" for r, v in added.items() if v is not None]
        _line(console, f"added latency per statement, {script}, 1 client: {', '.join(parts)}")
    if d.get("missing"):
        _line(console, f"PgBouncer not run: {d['missing']}")


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
    """One row per size: Redis's GET count for the lab's stampede and for redis-benchmark
    on the same Redis right after it, the demand, the client's CPU per GET."""
    points = d["points"]
    first = points[0]
    _line(
        console,
        f"buggy stampede, rebuild {first['rebuild_ms']:.0f} ms, a poll every "
        f"{first['poll_ms']:.0f} ms ({first['load']['redis_client']} client), then "
        f"redis-benchmark -t get with one connection per waiter; GET/s as Redis counted them",
    )
    head = (
        f"{'waiters':>7}  {'demand':>7}  {'lab GET/s':>9}  {'share':>5}  {'us/GET':>6}  "
        f"{'lab CPU':>7}  {'procs':>5}  {'bench GET/s':>11}  {'lab/bench':>9}  limit"
    )
    _line(console, head)
    for p in points:
        lab, ref = p["lab"], p["redis_benchmark"]
        _line(
            console,
            f"{p['n']:>7}  {p['demand_get_per_s']:>7}  {lab['get_per_s']:>9}  "
            f"{p['demand_share']:>5.0%}  {p['client_us_per_get']:>6.1f}  "
            f"{lab['client_cpu_per_s']:>7.2f}  {p['load']['procs']:>5}  "
            f"{ref['get_per_s']:>11}  {p['ratio']:>9.2f}  {lab['limit']}",
        )
    _line(
        console,
        "us/GET: the lab's CPU-seconds per GET Redis counted (each poll also sends a SET NX); "
        "lab CPU: CPU-s/s of the lab's processes over the wait window",
    )


def _isolation(console: Console, d: Mapping[str, Any]) -> None:
    pg, lab = d["pg_isolation_regress"], d["lab"]
    c = lab["counts"]
    _line(
        console, f"pg_isolation_regress  {pg['wall_s']:7.1f} s  {pg['passed']} of {d['specs']} ok"
    )
    _line(
        console,
        f"lab spec-suite        {lab['wall_s']:7.1f} s  {c['identical']} identical, "
        f"{c['differs']} differ, {c['skipped']} skipped ({lab['lanes']} lanes)",
    )
    verdict = "within" if d["ratio"] <= d["target_ratio"] else "ABOVE"
    load = ", ".join(f"{x:.2f}" for x in d["loadavg"])
    _line(
        console,
        f"ratio lab/pg_isolation_regress = {d['ratio']:.2f}  ({verdict} the "
        f"{d['target_ratio']}x target; load average {load})",
    )
