"""A cast of actors for the sequencer: actors in worker processes, and the faults on them
(pause, wake, kill) as steps of their own.

lab/pinned/sequencer.py pins asyncpg sessions and asks PostgreSQL when one is blocked. A lease
story needs more: a holder in a process of its own (lab/procs/workers.py) that the kernel
freezes between two of its steps, a lease that runs out while it is frozen, a holder that
is killed. The same Sequencer runs such a cast; this module declares it:

* ``InProcess``: an actor that runs in a worker process. Its code runs on a Session whose
  gate is ``ChildGate``: a step point reports ``asks`` (the step, the command it runs and
  its backend pid), waits at ``child.step`` for the grant, and reports ``stepped`` (its
  result) when done.
* ``Fault``: a step that acts on a process actor from outside: ``pause`` sends SIGSTOP,
  waits until the kernel reports the process stopped, then until the condition the
  scenario declares for it holds (a lease gone in Redis: there time is the subject, a
  TTL); ``wake`` sends SIGCONT; ``kill`` sends SIGKILL, ends the actor as ``killed`` and
  waits until the server has ended the actor's session (its locks, its transaction gone),
  then for its condition if it declares one.
* ``Staged``: the Pinned of a scenario with such a cast.

A step granted to a frozen actor prints ``<waiting ...>`` and ``<... completed>`` when it
runs on after ``wake``; a step for an actor frozen in a granted step makes the permutation
invalid. An explored interleaving may name only some of the steps (``Staged``'s
``explore_steps``): the steps after it run in the cast's order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lab.core.steps import Pinned, Session
from lab.pinned.transcript import error_fields
from lab.procs.workers import Child

if TYPE_CHECKING:
    from lab.core.scenario import Env

STEP_S = 20.0  # a granted step settles (its actor asks again, ends or is frozen) within this


@dataclass(frozen=True)
class Fault:
    """A fault step on a process actor. `until` is what the sequencer waits for once the
    kernel reports the process stopped (pause) or it is reaped and the server has ended its
    session (kill); `shown` says it in the transcript."""

    kind: Literal["pause", "wake", "kill"]
    until: Callable[[Env], Awaitable[bool]] | None = None
    shown: str = ""
    seconds: float = STEP_S


@dataclass(frozen=True)
class InProcess:
    """An actor that runs in a worker process: `script` (on lab.procs.workers, its step points on
    a ChildGate) with `config`; `faults` maps step names to the faults they are."""

    script: Path
    config: Mapping[str, Any]
    faults: Mapping[str, Fault] = field(default_factory=dict)


@dataclass(frozen=True)
class Staged(Pinned):
    """Pinned for a cast: the sessions named by `processes(env, variant)` run in worker
    processes (their lab connection stays idle), the others run `code[variant]` in the
    lab's loop. `explore_steps[variant]`, when given, are the steps explore interleaves."""

    processes: Callable[[Env, str], Mapping[str, InProcess]] | None = None
    explore_steps: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)


class ChildGate:
    """A Session's gate inside a worker process: its step points ask the lab for grants
    over the worker protocol and report their results as events."""

    def __init__(self, child: Child) -> None:
        self.child = child

    async def ask(self, session: Session, step: str, shown: str) -> None:
        pid = session.backend.get_server_pid() if session.backend is not None else 0
        self.child.emit("asks", step=step, shown=shown, pid=pid)  # pid: the lab looks at it
        await self.child.step(step)

    def finished(self, session: Session, step: str, result: str) -> None:
        self.child.emit("stepped", step=step, result=f"-> {result}")

    def failed(self, session: Session, step: str, exc: BaseException) -> None:
        self.child.emit("stepped", step=step, error=error_fields(exc))

    def waiting(self, session: Session, predicate: Callable[[], Awaitable[bool]] | None) -> None:
        return None
