"""advisory-pgbouncer: the code under test in advisory_pgbouncer.py, its claims in claims.py."""

from __future__ import annotations

from scenarios.advisory_pgbouncer.claims import SCENARIO, WARNING

__all__ = ["SCENARIO", "WARNING"]
