"""A service of service-lock-order in a process of its own, on the harness's worker
protocol (lab.procs.workers): its config is redis_url, token and keys (in its own order); it
waits for the grants `first` and `second` before it takes each key. Run as a script (its
folder is ``sys.path[0]``), it imports no scenario package."""

from __future__ import annotations

from lab.procs.workers import run_child

if __package__:
    from scenarios.service_lock_order.service_lock_order import service
else:  # the worker process
    from service_lock_order import service  # type: ignore[import-not-found,no-redef]

if __name__ == "__main__":
    run_child(service)
