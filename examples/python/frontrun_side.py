"""frontrun's side of compare_frontrun.py: explore two calls of an example's `main(dsn)`
(the same function `locklab explore --actor` runs as a command) with frontrun's DPOR, and
print one JSON line: found or not, executions, seconds, frontrun's own explanation.

Run it under frontrun's CLI in a venv that has frontrun (compare_frontrun.py makes one),
never the project's:

    frontrun python frontrun_side.py --dsn DSN --setup booking-setup.sql \
        --invariant booking-kept.sql --worker '["overbooking_psycopg", {"guest": "ann"}]' \
        --worker '["overbooking_psycopg", {"guest": "bob"}]' [--first]

Each execution starts on the same database, reset: other sessions on it ended, the public
schema dropped and made again, the setup run (frontrun's way: `setup()` resets the store
and returns its handle). An execution breaks as a lab order does: the invariant reads
false or a worker raised. The worker's exception is kept in the state and judged by the
invariant, so frontrun shows its counterexample instead of stopping at the raise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import frontrun
import psycopg

HERE = Path(__file__).resolve().parent


def example(name: str) -> ModuleType:
    """An example program of this folder as a module, its __main__ part not run."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def admin(dsn: str) -> psycopg.Connection[Any]:
    """A connection frontrun does not watch: it patches `psycopg.connect`, the users'
    entry point, and this harness's own setup and invariant are no part of the race."""
    return psycopg.Connection.connect(dsn, autocommit=True)


@dataclass
class State:
    """One execution's handle: the database, and what each worker raised."""

    dsn: str
    raised: list[str] = field(default_factory=list)


def reset(dsn: str, setup: str) -> State:
    """The database as the setup leaves it, no other session on it."""
    with admin(dsn) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")
        conn.execute(setup.encode())
    return State(dsn)


def worker(module: ModuleType, kwargs: dict[str, Any]) -> Any:
    """Call the example's main(dsn, **kwargs); what it raises is kept, as a lab actor's
    nonzero exit is."""

    def run(state: State) -> None:
        try:
            module.main(state.dsn, **kwargs)
        except Exception as exc:
            sqlstate = getattr(exc, "sqlstate", None)
            state.raised.append(f"{type(exc).__name__}" + (f" ({sqlstate})" if sqlstate else ""))

    return run


def kept(invariant: str) -> Any:
    def check(state: State) -> bool:
        with admin(state.dsn) as conn:
            row = conn.execute(invariant.encode()).fetchone()
        return bool(row is not None and row[0] is True and not state.raised)

    return check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--setup", type=Path, required=True)
    parser.add_argument("--invariant", type=Path, required=True)
    parser.add_argument("--worker", action="append", required=True, help='["module", {kwargs}]')
    parser.add_argument("--first", action="store_true", help="stop at the first failure")
    parser.add_argument("--lock-timeout", type=int, default=None, help="frontrun's, in ms")
    parser.add_argument(
        "--no-sql-check", action="store_true", help="warn_nondeterministic_sql=False"
    )
    args = parser.parse_args()
    setup, invariant = args.setup.read_text(), args.invariant.read_text()
    workers = []
    for spec in args.worker:
        name, kwargs = json.loads(spec)
        workers.append(worker(example(name), kwargs))
    started = time.monotonic()
    try:
        result = frontrun.explore(
            setup=lambda: reset(args.dsn, setup),
            workers=workers,
            invariant=kept(invariant),
            stop_on_first=args.first,
            lock_timeout=args.lock_timeout,
            warn_nondeterministic_sql=not args.no_sql_check,
        )
    except Exception as exc:  # what the user would see instead of a result
        out = {"raised": f"{type(exc).__name__}: {exc}", "seconds": time.monotonic() - started}
        print(json.dumps(out))
        return
    seconds = time.monotonic() - started
    print(
        json.dumps(
            {
                "frontrun": frontrun.__version__,
                "property_holds": result.property_holds,
                "executions": result.num_explored,
                "failures": [n for n, _ in result.failures],
                "seconds": seconds,
                "explanation": result.explanation,
                "inconclusive": result.inconclusive_reason,
                "reproduced": [result.reproduction_successes, result.reproduction_attempts],
            }
        )
    )


if __name__ == "__main__":
    main()
