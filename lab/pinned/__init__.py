"""The ordering engine: named steps granted in schedule order on what the server reports,
for one schedule (`locklab trace`) or every interleaving (`locklab explore`).

One database serves a whole command: before each run its ``public`` schema is dropped
and the scenario's setup runs again (a scenario with a ``schema`` has its tables emptied
instead, while nothing changed them: lab/pinned/fastreset.py), each session gets a fresh
connection, and after the run the sessions' backends are terminated (waiting until they
are gone, so no lock of one run outlives it). The scenario's invariants are checked after
every run, as after a load.

An explore record keeps, per variant and isolation level, how many interleavings kept
every invariant, how many broke one and how (each session's outcome word or SQLSTATE),
how many were invalid (a blocked session asked for its next step), the first failing
schedule's transcript and the canonical schedules' results. Claims marked ``explore``
are judged on it (``locklab verify``).

Every run keeps the times its runner measured (``timing``: each step's grant, block and
end in ms from the schedule's start). A trace record keeps its runs so, and says where
``--svg`` drew them; ``locklab report`` draws the runs of both records
(lab/output/trace_svg.py).

The package: ``sequencer`` (the one ordering engine), ``rules`` (how it runs a schedule:
`Rules`, the limits of its waits, what it tells a watch), ``interleave`` (the server's look
at a session: is it waiting on a lock, and on whom), ``transcript`` (what a run printed and
when), ``cast`` and ``stage`` (sessions in worker processes, faults as steps), ``timed`` (a
story told at its planned times), ``rowgate`` (a gate inside one statement: each row an
UPDATE locked waits before it is changed), ``database`` and ``fastreset`` (one database
per command, reset before each run), ``schedules`` (results, expected transcripts' names,
the schedules a command runs), ``permutations`` (every interleaving of the sessions'
steps), ``footprint`` and ``reduce`` (what a step touched, when two steps commute, one
schedule of each set of equivalent ones), ``trace`` and ``explore`` (the two commands and
their records), ``claims`` (claims about interleavings, judged on an explore record),
``scripted`` (`locklab run` of a pinned scenario: its canonical schedule, timed). The
public names of ``claims``, ``database``, ``schedules``, ``trace`` and ``explore`` are
re-exported here.
"""

from __future__ import annotations

from lab.pinned.claims import (
    RC,
    broke_in_some,
    canonical,
    error_in,
    kept_in_all,
    level_as,
    nobody_waited,
    on_canonical,
    one_interleaving_broken,
    waited_in,
)
from lab.pinned.database import PinnedDatabase, PinnedLab, pinned_lab, watch_pool
from lab.pinned.explore import explore, explore_path, merge_explores, write_explore
from lab.pinned.schedules import (
    EXPLORE_DIR,
    STEP_ERROR,
    TRACE_DIR,
    PinnedResult,
    check_steps,
    expected_dir,
    expected_name,
    isolation_levels,
    pinned_of,
    schedules_for,
)
from lab.pinned.trace import (
    trace,
    trace_record,
    write_trace,
)

__all__ = [
    "EXPLORE_DIR",
    "RC",
    "STEP_ERROR",
    "TRACE_DIR",
    "PinnedDatabase",
    "PinnedLab",
    "PinnedResult",
    "broke_in_some",
    "canonical",
    "check_steps",
    "error_in",
    "expected_dir",
    "expected_name",
    "explore",
    "explore_path",
    "isolation_levels",
    "kept_in_all",
    "level_as",
    "merge_explores",
    "nobody_waited",
    "on_canonical",
    "one_interleaving_broken",
    "pinned_lab",
    "pinned_of",
    "schedules_for",
    "trace",
    "trace_record",
    "waited_in",
    "watch_pool",
    "write_explore",
    "write_trace",
]
