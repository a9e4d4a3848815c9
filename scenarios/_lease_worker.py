"""Where redlock, lease-busy-loop and redis-failover found the lease holder's code: it moved
beside its scenario (scenarios/lease_gc_pause/lease_gc_pause.py, the code under test, and
worker.py, the process on lab.workers); these names stay importable from here."""

from __future__ import annotations

from scenarios.lease_gc_pause.lease_gc_pause import (
    INVOICE_ID,
    RELEASES,
    WRITE_FENCED,
    WRITE_PLAIN,
    Hook,
    Lease,
    Report,
    hold,
    noop,
)
from scenarios.lease_gc_pause.worker import BUSY_ROW, QuorumLease, busy_payload

__all__ = [
    "BUSY_ROW",
    "INVOICE_ID",
    "RELEASES",
    "WRITE_FENCED",
    "WRITE_PLAIN",
    "Hook",
    "Lease",
    "QuorumLease",
    "Report",
    "busy_payload",
    "hold",
    "noop",
]
