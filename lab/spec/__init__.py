"""PostgreSQL's isolation specs, run by the lab and printed as the isolation tester prints
them. The lab never runs isolationtester itself; its tests run it beside this as the
reference.

The package: ``parse`` (the spec language), ``wire`` (a small libpq), ``session`` (the
sessions' kept connections and the handles the sequencer holds), ``tester`` (the tester's
own loop: what it prints as each step is granted), ``printout`` (PQprint's tables), ``run``
(the permutations on the lab's sequencer, and `trace_spec`, what `locklab trace FILE.spec`
calls), ``explore`` (every interleaving), ``databases`` (the one place the runners make and
drop databases), ``expected`` (an output against its expected file and the alternates),
``suite`` (a folder of specs run as pg_isolation_regress runs them: `locklab spec-suite`),
``bench`` (`locklab bench isolation`: the lab's runner against pg_isolation_regress).
"""

from __future__ import annotations

from lab.spec.parse import SpecError, parse_spec, read_spec
from lab.spec.run import run_spec, trace_spec

__all__ = ["SpecError", "parse_spec", "read_spec", "run_spec", "trace_spec"]
