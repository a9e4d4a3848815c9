"""A pinned scenario's variants as script variants: `locklab run` of a scenario whose subject
is one order of many sessions runs its canonical schedule under the Sequencer, timed,
with the invariants."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from lab.core.steps import Session
from lab.pinned.sequencer import Sequencer

if TYPE_CHECKING:
    from lab.core.scenario import Env
    from lab.core.steps import Pinned, SessionCode


def scripted(pinned: Pinned, schedule: str) -> dict[str, Callable[[Env], Awaitable[None]]]:
    """Each variant as a ``kind="script"`` variant that runs its canonical `schedule` under
    a Sequencer on the run's database: for a scenario whose subject is one order of many
    sessions (a lock queue), a `locklab run` is that order, timed, with the invariants.
    Each session's outcome word is counted; the transcript and the steps the server showed
    blocked go into the record's evidence."""

    def variant(name: str, code: SessionCode) -> Callable[[Env], Awaitable[None]]:
        async def run(env: Env) -> None:
            conns = [
                await env.connect(
                    server_settings={"application_name": f"locklab/{env.scenario}/{s}"}
                )
                for s in pinned.sessions
            ]

            def bind(s: Session) -> Awaitable[str]:
                return code(env, s)

            seq = Sequencer(
                env.db,
                {s: (c, bind) for s, c in zip(pinned.sessions, conns, strict=True)},
                label=f"{env.scenario} / {name} / {schedule}",
                header=f"schedule {schedule}   ({env.scenario} / {name})",
            )
            try:
                outcomes = await seq.run(pinned.schedules[name][schedule])
            finally:
                for c in conns:
                    c.terminate()
                env.extra_evidence["transcript"] = seq.transcript.text()
                env.extra_evidence["waited"] = list(seq.waited)
            for word in outcomes.values():
                env.outcome(word)

        return run

    return {name: variant(name, code) for name, code in pinned.code.items()}
