"""``locklab explore FILE.spec``: every interleaving of a spec's steps (its permutation
lines aside), at each isolation level the spec leaves open, and what each did.

Each permutation runs as the tester runs it (lab/spec/run.py), with one rule of the lab's
sequencer: a step that comes due on a session still waiting on a lock, while another
session could move, makes the permutation invalid (skipped and counted), as it did in
the tester before PostgreSQL 14. A permutation ends *ok* (no step failed), with errors
(the SQLSTATEs of the steps that failed: s2 u2 40P01), *gave up* (the tester's exit:
mutually blocked steps, a failed setup) or *invalid*. Permutations with the same ending
form one outcome; the first of each is kept with what it printed.

The isolation axis: the spec's connections log in with ``default_transaction_isolation``
at each level, unless the spec sets one itself (``ISOLATION LEVEL``, ``SET TRANSACTION``,
``default_transaction_isolation`` in its text): then once, at the server's default.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from lab.errors import LabError
from lab.spec.databases import Databases
from lab.spec.parse import PermutationStep, Spec, read_spec
from lab.spec.run import Invalid, SpecRun, _Exit, all_permutations

LEVELS = ("read committed", "repeatable read", "serializable")
OWN_LEVEL = re.compile(
    r"\bisolation\s+level\b|\bset\s+transaction\b|\bdefault_transaction_isolation\b", re.I
)
MAX_PERMUTATIONS = 2000  # more than this is refused (the count grows as a multinomial)


@dataclass
class Outcome:
    ending: str  # "ok", "s2 u2 40P01, s1 c1 40001", "gave up", "invalid"
    count: int = 0
    first: str = ""  # the first such permutation's steps
    text: str = ""  # what it printed


@dataclass
class LevelResult:
    level: str  # an isolation level, or "the spec's own"
    permutations: int = 0
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    def count(self, ending: str) -> int:
        return self.outcomes[ending].count if ending in self.outcomes else 0

    def cell(self) -> str:
        """One cell of the table: ok n/m, each SQLSTATE's count, gave up, invalid."""
        valid = self.permutations - self.count("invalid")
        parts = [f"ok {self.count('ok')}/{valid}"]
        states: dict[str, int] = {}
        for ending, o in self.outcomes.items():
            for word in re.findall(r"\b[0-9A-Z]{5}\b", ending):
                states[word] = states.get(word, 0) + o.count
        parts += [f"{code} in {n}" for code, n in sorted(states.items())]
        if self.count("gave up"):
            parts.append(f"gave up {self.count('gave up')}")
        if self.count("invalid"):
            parts.append(f"(invalid {self.count('invalid')} of {self.permutations})")
        return ", ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "level": self.level,
            "permutations": self.permutations,
            "outcomes": [vars(o) for o in self.outcomes.values()],
        }


def levels_for(spec_text: str, asked: str | None) -> list[str]:
    """The isolation levels to run: those asked (a comma list), or every level; only the
    spec's own when it sets one (asking for a level then is refused)."""
    own = OWN_LEVEL.search(spec_text) is not None
    if asked is None:
        return ["the spec's own"] if own else list(LEVELS)
    levels = [word.strip().replace("_", " ").lower() for word in asked.split(",")]
    bad = [w for w in levels if w not in LEVELS]
    if bad or not levels:
        raise LabError(
            f"--isolation {asked!r}: expected read_committed, repeatable_read, serializable"
        )
    if own:
        raise LabError("--isolation: this spec sets its own isolation level")
    return list(dict.fromkeys(levels))


def _ending(run: SpecRun) -> str:
    failed = [
        f"{session_of(run.spec, name)} {name} {state}" for name, state, _ in run.done if state
    ]
    return ", ".join(failed) if failed else "ok"


def session_of(spec: Spec, step: str) -> str:
    return spec.sessions[spec.step(step).session].name


class _Explorer:
    def __init__(
        self, spec: Spec, dsn: str, dbs: Databases, database: str, startup: dict[str, str]
    ) -> None:
        self.spec, self.dsn, self.dbs, self.database = spec, dsn, dbs, database
        self.startup = startup
        self.run = self._connect()

    def _connect(self) -> SpecRun:
        run = SpecRun(self.spec, startup=self.startup, invalid_if_blocked=True)
        run.connect(self.dsn, self.database)
        return run

    def permutation(self, steps: list[PermutationStep]) -> tuple[str, str]:
        """(its ending, what it printed)."""
        run = self.run
        run.out, run.done = [], []
        try:
            run.permutation(steps)
            return _ending(run), "".join(run.out)
        except (Invalid, _Exit) as exc:
            ending = "invalid" if isinstance(exc, Invalid) else "gave up"
            text = "".join(run.out)
            if ending == "gave up" or not run.abandon():
                run.close()  # sessions mid-step, no teardown ran: a clean database again
                self.dbs.remake(self.database)
                self.run = self._connect()
            return ending, text

    def close(self) -> None:
        self.run.close()


def explore_spec(
    path: Path, dsn: str, isolation: str | None = None, deadlock_ms: int | None = None
) -> list[LevelResult]:
    """Every interleaving of the spec at `path`, at each level; a database of its own.
    `deadlock_ms`: the sessions' deadlock_timeout (else the server's, or the spec's own)."""
    spec = read_spec(path)
    levels = levels_for(path.read_text(errors="replace"), isolation)
    perms = all_permutations(spec)
    if len(perms) > MAX_PERMUTATIONS:
        raise LabError(
            f"{path}: {len(perms)} interleavings, more than explore runs ({MAX_PERMUTATIONS})"
        )
    dbs = Databases(dsn)
    results = []
    try:
        database = dbs.make(f"locklab_explore_{secrets.token_hex(4)}")
        for level in levels:
            res = LevelResult(level, len(perms))
            startup = {} if level not in LEVELS else {"default_transaction_isolation": level}
            if deadlock_ms is not None:
                startup["deadlock_timeout"] = f"{deadlock_ms}ms"
            explorer = _Explorer(spec, dsn, dbs, database, startup)
            try:
                for steps in perms:
                    ending, text = explorer.permutation(steps)
                    o = res.outcomes.setdefault(ending, Outcome(ending))
                    if not o.count:
                        o.first, o.text = " ".join(ps.name for ps in steps), text
                    o.count += 1
            finally:
                explorer.close()
            results.append(res)
    finally:
        dbs.close()
    return results


def table_lines(path: Path, results: list[LevelResult]) -> list[str]:
    """The table (one line per level), then each outcome with its first permutation."""
    width = max(len(r.level) for r in results)
    lines = [f"{path.name}: every interleaving ({results[0].permutations} permutations)"]
    lines += [f"  {r.level:<{width}}  {r.cell()}" for r in results]
    for r in results:
        lines.append("")
        lines.append(f"{r.level}:")
        for o in sorted(r.outcomes.values(), key=lambda o: -o.count):
            lines.append(f"  {o.count:>4}  {o.ending:<40}  first: {o.first}")
    return lines
