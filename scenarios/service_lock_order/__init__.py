"""service-lock-order: the code under test in service_lock_order.py (a service's code and
the two orders), the service's process in worker.py, the lab's watch in watch.py, its
claims in claims.py."""

from __future__ import annotations

from scenarios.service_lock_order.claims import SCENARIO

__all__ = ["SCENARIO"]
