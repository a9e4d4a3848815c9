"""What a pinned run printed and when: the transcript (header, step lines, DETAIL lines,
the sessions' ends, invariants) and each granted step on the schedule's clock.

Transcripts are normalised (pids become session names, xids and OIDs letters) so the
same schedule prints the same text on every run. The times are kept beside the text, not
in it: a ``StepClock`` stamps each grant, each step the server showed blocked, each step's
end and each session's end, in monotonic ms from the schedule's start (what
``locklab trace --svg`` draws, lab/output/trace_svg.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import asyncpg


def error_fields(exc: BaseException) -> dict[str, str]:
    """What a step's error says (sent as is by a worker process): its SQLSTATE, message and
    DETAIL for a server error, else its type and text. The sequencer prints it."""
    if isinstance(exc, asyncpg.PostgresError):
        message = getattr(exc, "message", None) or str(exc).splitlines()[0]
        return {"sqlstate": exc.sqlstate, "message": message, "detail": exc.detail or ""}
    return {"type": type(exc).__name__, "message": str(exc)}


def completed(result: str) -> str:
    """The line of a step that ends after it was shown waiting: its result without the
    ``-> `` a finished step's result starts with (a prefix, not characters: ``-> -2``)."""
    return f"<... completed> {result.removeprefix('-> ')}"


@dataclass
class Line:
    who: str  # "s1 read", "invariant", "s1"
    shown: str  # SQL or command ("" on a completion line)
    result: str
    more: list[str] = field(default_factory=list)  # DETAIL lines


@dataclass
class Transcript:
    """What a pinned run printed: header, step lines, session ends, invariants."""

    header: str
    lines: list[Line] = field(default_factory=list)

    def add(self, who: str, shown: str, result: str, more: Sequence[str] = ()) -> None:
        self.lines.append(Line(who, shown, result, list(more)))

    def text(self, sql_width: int = 64) -> str:
        w1 = max((len(x.who) for x in self.lines), default=0)
        w2 = min(sql_width, max((len(x.shown) for x in self.lines), default=0))
        out = [self.header]
        for x in self.lines:
            row = f"{x.who:<{w1}}  {x.shown:<{w2}}  {x.result}".rstrip()
            out.append(row)
            out += [f"{'':<{w1}}  {'':<{w2}}  {m}".rstrip() for m in x.more]
        return "\n".join(out) + "\n"


@dataclass
class StepTime:
    """One granted step on the schedule's clock (ms since the schedule started)."""

    session: str
    step: str
    shown: str  # the SQL or command, as the transcript prints it
    granted_ms: float
    waiting_ms: float | None = None  # its line said <waiting ...> (the server showed it blocked)
    ended_ms: float | None = None  # None: the run ended before the step did
    result: str = ""  # "UPDATE 1", "ERROR 40P01 deadlock detected"

    def to_json(self) -> dict[str, object]:
        return asdict(self)


class StepClock:
    """The measured times of one pinned run: monotonic ms from `start()` (the schedule's
    start), stamped by the runner at each grant, block, step end and session end."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self.steps: list[StepTime] = []
        self.ends: dict[str, float] = {}  # session -> when its code ended
        self.end_ms: float | None = None  # when the runner was done with the schedule
        self.spans: list[dict[str, object]] = []  # a state of a session: frozen by SIGSTOP

    def start(self) -> None:
        self._t0 = time.monotonic()

    def now(self) -> float:
        return round((time.monotonic() - self._t0) * 1000, 3)

    def granted(self, session: str, step: str, shown: str) -> None:
        self.steps.append(StepTime(session, step, shown, self.now()))

    def _open(self, session: str, step: str) -> StepTime | None:
        return next(
            (t for t in reversed(self.steps) if t.session == session and t.step == step), None
        )

    def waiting(self, session: str, step: str) -> None:
        t = self._open(session, step)
        if t is not None and t.waiting_ms is None:
            t.waiting_ms = self.now() if t.ended_ms is None else t.granted_ms

    def ended(self, session: str, step: str, result: str, shown: str = "") -> None:
        t = self._open(session, step)
        if t is not None and t.ended_ms is None:
            t.ended_ms, t.result = self.now(), result.removeprefix("-> ")
            t.shown = shown or t.shown

    def session_ended(self, session: str) -> None:
        self.ends.setdefault(session, self.now())

    def span(self, session: str, what: str, *, start: bool) -> None:
        """A state of `session` begins (`start`) or ends now: "frozen" from SIGSTOP to SIGCONT."""
        if start:
            self.spans.append({"session": session, "what": what, "start_ms": self.now()})
            return
        for sp in reversed(self.spans):
            if sp["session"] == session and sp["what"] == what and "end_ms" not in sp:
                sp["end_ms"] = self.now()
                return

    def to_json(self) -> dict[str, object]:
        return {
            "unit": "ms",
            "steps": [t.to_json() for t in self.steps],
            "ends": dict(self.ends),
            "end_ms": self.end_ms if self.end_ms is not None else self.now(),
            "spans": [dict(sp) for sp in self.spans],  # one still open has no end_ms
        }
