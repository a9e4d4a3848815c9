"""locklab: run concurrency bugs and their fixes against real PostgreSQL and Redis."""

__version__ = "0.1.0"
