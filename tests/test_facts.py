"""What a record says about the machine over a variant's window (lab.load.facts)."""

from __future__ import annotations

from lab.load.facts import machine_window


def test_the_window_records_the_wall_clock_against_the_monotonic_one() -> None:
    """Redis's expiries and PostgreSQL's now() run on the wall clock, the lab's times on
    the monotonic one: the record says how far the first moved against the second."""
    start = machine_window()
    window = machine_window(start)
    assert set(window) >= {"window_ms", "lab_cpu_wait_share", "cores_busy", "wall_clock_step_ms"}
    assert isinstance(window["wall_clock_step_ms"], float)


def test_cpu_seconds_sees_a_few_milliseconds() -> None:
    """lab.procs.procstat.cpu_seconds counts ns (schedstat), not 10 ms ticks: 3 ms of CPU
    in this process show (ticks read 0 for a short window of a waiting client)."""
    import os
    import time

    from lab.procs.procstat import cpu_seconds

    before, t0 = cpu_seconds(os.getpid()), time.process_time()
    while time.process_time() - t0 < 0.003:
        pass
    assert cpu_seconds(os.getpid()) - before >= 0.002
