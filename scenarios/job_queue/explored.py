"""job-queue, the checks on the explore record's canonical schedules: race (all three claims
in flight, then the commits) gives the published batches without a wait (LC-16) and leaves
the jobs a stuck claim holds invisible, no wait and no error (LC-17); with no row lock, queue
has the overlapping claims take the same jobs and run them twice. `claimed` reads the batch
a session's claim returned from the transcript. The race's counterfactual is a code mutant's
run of it (mutant-no-skip-locked: FOR UPDATE alone, whose later claims wait).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.core.records import PinnedRunJson
from lab.pinned.claims import step_result

MEASURED_LINES = [  # the same batches in the lab's notation
    "worker-1 claimed [1001, 1002, 1003 ... 1010]",
    "worker-2 claimed [1011, 1012, 1013 ... 1020]",
    "worker-3 claimed []",
]
TWICE = "no job processed twice"


def claimed(run: Mapping[str, Any], session: str) -> str:
    """The batch `session`'s claim returned, as the transcript shows it."""
    return step_result(run, session, "claim")


def _lines(run: Mapping[str, Any]) -> list[str]:
    return [f"worker-{i} claimed {claimed(run, f's{i}')}" for i in (1, 2, 3)]


def _published(run: PinnedRunJson) -> tuple[bool, str]:
    lines = _lines(run)
    held = lines == MEASURED_LINES and not run["waited"] and run["kept"]
    return held, f"race: {'; '.join(lines)}; waited: {', '.join(run['waited']) or 'none'}"


def _same_jobs(run: PinnedRunJson) -> tuple[bool, str]:
    lines = _lines(run)
    twice = claimed(run, "s1") == claimed(run, "s2") != "[]"
    seen = f"queue: {'; '.join(lines)}; waited: {', '.join(run['waited'])}"
    return twice and "s2 claim" in run["waited"], seen


def _ran_twice(run: PinnedRunJson) -> tuple[bool, str]:
    inv = next((i for i in run["invariants"] if i["name"] == TWICE), None)
    if inv is None:
        return False, f"queue: no invariant named {TWICE}"
    return not inv["held"], f"queue: {TWICE}: {inv['detail']}"


def _invisible(run: PinnedRunJson) -> tuple[bool, str]:
    """s3 claims while s1 and s2 sit idle in transaction on 1001..1020: nothing, no wait,
    no error; once they commit every job was claimed exactly once."""
    got, errors = claimed(run, "s3"), "ERROR" in run["transcript"]
    held = got == "[]" and not run["waited"] and not errors and run["kept"]
    return held, (
        f"race: s3's claim -> {got} while s1, s2 held 20 pending jobs uncommitted; "
        f"waited: {', '.join(run['waited']) or 'none'}; errors: {errors}"
    )
