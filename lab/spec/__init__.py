"""PostgreSQL's isolation specs, run by the lab and printed as the isolation tester prints
them: ``parse`` (the spec language), ``wire`` (a small libpq), ``printout`` (PQprint's
tables), ``run`` (the permutations on the lab's sequencer, printed by the tester's loop,
and `trace_spec`, what ``locklab trace FILE.spec`` calls), ``explore`` (every
interleaving). The lab never runs isolationtester itself; its tests run it beside this as
the reference.
"""

from __future__ import annotations

from lab.spec.parse import SpecError, parse_spec, read_spec
from lab.spec.run import run_spec, trace_spec

__all__ = ["SpecError", "parse_spec", "read_spec", "run_spec", "trace_spec"]
