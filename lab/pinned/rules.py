"""How the Sequencer (lab/pinned/sequencer.py) runs a schedule: its Rules, the limits of
its waits, and what it tells a Watch of each item.

Steps that end by themselves (a lock_timeout or statement_timeout fires):

* a step marked ``(*)`` in the schedule (``"s2 alter(*)"``) prints ``<waiting ...>`` as
  soon as it is granted and the schedule waits for its ``<... completed>`` before the
  next item, so the text does not depend on whether the server was seen reporting it
  blocked first;
* a step in ``Rules.ends_by_itself`` (a scenario's ``Pinned.ends_by_itself``) is waited
  for in the same way, in every schedule, but only once the server shows it blocked: a
  step that did not block prints its result as any other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from lab.pinned.cast import SessionState
from lab.pinned.interleave import TIMEOUT_S

POLL_S = 0.002  # between two looks at the server while a step settles
RESOLVE_S = 30.0  # every session blocked: how long the server may take to break it, at least

# A wait for a session's change also wakes this often: a worker process the kernel holds
# stopped, or the server breaking a cycle, tells the sequencer nothing by itself.
WAKE_S = 0.05

Overdue = Callable[[Sequence[SessionState], int], Awaitable[None]]


@dataclass(frozen=True)
class Rules:
    """How the Sequencer runs a schedule (see the module doc): LAB_RULES for the lab's
    scenarios; PostgreSQL's isolation tester's for its specs (`persist`, `wait_blocked`)."""

    timeout: float = TIMEOUT_S  # a granted step must end or block within this
    resolve_timeout: float = RESOLVE_S  # every session blocked: how long the server may take
    ends_by_itself: frozenset[str] = frozenset()  # "s2 ask-row": steps a timeout ends
    # grant the steps the schedule leaves out, in cast order (an explored interleaving of
    # some of the steps)
    finish: bool = False
    # a session outlives its code (an isolation spec's session keeps its open transaction
    # and its locks after its last step), so an ended session counts as one that could
    # still move: a step due on a blocked session is then invalid unless every one is
    persist: bool = False
    # a step due on a blocked session waits for its step to end, and after the schedule
    # each session's blocked step is waited for in the order granted (the isolation tester
    # since PostgreSQL 14)
    wait_blocked: bool = False


LAB_RULES = Rules()


class Watch(Protocol):
    """Told of each schedule item with every session settled: what prints the isolation
    tester's own text (lab/spec/tester.py) from what the sessions recorded."""

    async def due(self, k: int, session: str) -> None:
        """Item `k` is due on `session` (with `wait_blocked`, its blocked step has ended)."""

    async def granted(self, k: int, session: str) -> None:
        """Item `k` was granted and every session has settled since."""

    async def ended(self) -> None:
        """The schedule is done and every session has ended."""
