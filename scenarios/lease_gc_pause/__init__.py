"""lease-gc-pause: the code under test in lease_gc_pause.py, A's process in worker.py, the
pinned schedules in schedules.py (golden transcripts in expected/), the timed story in
choreography.py, its claims in claims.py; overlap.py, a holder stalled past its lease
while another takes the lock, is redlock's and lease-busy-loop's story."""

from __future__ import annotations

from scenarios.lease_gc_pause.choreography import WorkerProcess
from scenarios.lease_gc_pause.claims import FENCE_INVARIANT, SCENARIO, TTL_MS, invariant, setup

# redlock and lease-busy-loop reuse the setup, the invariant and the worker process
__all__ = [
    "FENCE_INVARIANT",
    "SCENARIO",
    "TTL_MS",
    "WorkerProcess",
    "invariant",
    "setup",
]
