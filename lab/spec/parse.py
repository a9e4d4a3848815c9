"""The isolation tester's spec language, read into a `Spec` (PostgreSQL's
src/test/isolation/README, specscanner.l and specparse.y say what it is).

::

    spec        := setup* [teardown] session+ permutation*
    setup       := "setup" SQL          teardown := "teardown" SQL
    session     := "session" NAME [setup] step+ [teardown]
    step        := "step" NAME SQL
    permutation := "permutation" pstep+
    pstep       := NAME [ "(" blocker ("," blocker)* ")" ]
    blocker     := "*" | NAME | NAME "notices" INTEGER

A NAME is an identifier (letters, digits, ``_``, ``$``, not starting with a digit) or a
double-quoted one (``""`` inside is a quote); keywords are lower case. SQL is ``{ ... }``:
the text up to the first ``}``, without the blanks after ``{`` and before ``}``. ``#``
starts a comment. Every mistake is a `SpecError` naming file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from lab.errors import LabError

KEYWORDS = frozenset({"notices", "permutation", "session", "setup", "step", "teardown"})
BLANK = " \t\r\f"
IDENT = re.compile(r"[A-Za-z_\x80-\U0010ffff][A-Za-z0-9_$\x80-\U0010ffff]*")


class SpecError(LabError):
    """A spec the tester would refuse: one line, ``FILE:LINE: what``."""


@dataclass
class Step:
    name: str
    sql: str
    session: int  # index of its session
    line: int


@dataclass
class Session:
    name: str
    setup: str | None
    steps: list[Step]
    teardown: str | None


@dataclass
class Blocker:
    """``(*)``: "once"; ``(s2a)``: "step", until s2a is no longer running; ``(s2a notices
    1)``: "notices", until s2a's session has sent one more notice."""

    kind: str  # "once", "step", "notices"
    step: str = ""
    notices: int = 0


@dataclass
class PermutationStep:
    name: str
    line: int
    blockers: list[Blocker] = field(default_factory=list)


@dataclass
class Spec:
    setups: list[str]
    teardown: str | None
    sessions: list[Session]
    permutations: list[list[PermutationStep]]
    warnings: list[str] = field(default_factory=list)  # what the tester says and goes on

    def step(self, name: str) -> Step:
        return next(s for sess in self.sessions for s in sess.steps if s.name == name)


@dataclass
class _Token:
    kind: str  # a keyword, "name", "sql", "int", one of ",()*", "end"
    text: str
    line: int


def _tokens(text: str, where: str) -> list[_Token]:
    out: list[_Token] = []
    i, line, n = 0, 1, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            i += 1
        elif ch in BLANK:
            i += 1
        elif ch == "#":
            while i < n and text[i] not in "\r\n":
                i += 1
        elif ch == '"':
            j, name = i + 1, ""
            while True:
                if j >= n:
                    raise SpecError(f"{where}:{line}: unterminated quoted identifier")
                if text[j] == "\n":
                    raise SpecError(f"{where}:{line}: unexpected newline in quoted identifier")
                if text[j] == '"':
                    if text[j + 1 : j + 2] != '"':
                        break
                    j += 1
                name += text[j]
                j += 1
            out.append(_Token("name", name, line))
            i = j + 1
        elif ch == "{":
            end = text.find("}", i)
            if end < 0:
                raise SpecError(f"{where}:{line}: unterminated sql block")
            out.append(_Token("sql", text[i + 1 : end].lstrip(BLANK).rstrip(BLANK), line))
            line += text.count("\n", i, end)
            i = end + 1
        elif ch.isascii() and ch.isdigit():
            j = i
            while j < n and text[j].isascii() and text[j].isdigit():
                j += 1
            out.append(_Token("int", text[i:j], line))
            i = j
        elif ch in ",()*":
            out.append(_Token(ch, ch, line))
            i += 1
        elif m := IDENT.match(text, i):
            word = m.group()
            out.append(_Token(word if word in KEYWORDS else "name", word, line))
            i = m.end()
        else:
            raise SpecError(f"{where}:{line}: syntax error: unexpected character {ch!r}")
    out.append(_Token("end", "", line))
    return out


class _Parser:
    def __init__(self, text: str, where: str) -> None:
        self.where = where
        self.toks = _tokens(text, where)
        self.at = 0

    @property
    def tok(self) -> _Token:
        return self.toks[self.at]

    def fail(self, what: str) -> SpecError:
        t = self.tok
        near = "end of file" if t.kind == "end" else repr(t.text if t.kind != "sql" else "{")
        return SpecError(f"{self.where}:{t.line}: syntax error at {near}: expected {what}")

    def take(self, kind: str, what: str) -> _Token:
        if self.tok.kind != kind:
            raise self.fail(what)
        self.at += 1
        return self.toks[self.at - 1]

    def opt_sql(self, keyword: str) -> str | None:
        if self.tok.kind != keyword:
            return None
        self.at += 1
        return self.take("sql", f"{{ SQL }} after {keyword}").text

    def spec(self) -> Spec:
        setups = []
        while (sql := self.opt_sql("setup")) is not None:
            setups.append(sql)
        teardown = self.opt_sql("teardown")
        sessions = [self.session(0)]
        while self.tok.kind == "session":
            sessions.append(self.session(len(sessions)))
        perms = []
        while self.tok.kind == "permutation":
            self.at += 1
            perm = [self.pstep()]
            while self.tok.kind == "name":
                perm.append(self.pstep())
            perms.append(perm)
        if self.tok.kind != "end":
            raise self.fail("session, permutation or end of file")
        return Spec(setups, teardown, sessions, perms)

    def session(self, index: int) -> Session:
        self.take("session", "session")
        name = self.take("name", "a session name").text
        setup = self.opt_sql("setup")
        steps = [self.step(index)]
        while self.tok.kind == "step":
            steps.append(self.step(index))
        return Session(name, setup, steps, self.opt_sql("teardown"))

    def step(self, session: int) -> Step:
        self.take("step", "step")
        name = self.take("name", "a step name")
        return Step(name.text, self.take("sql", "{ SQL } of the step").text, session, name.line)

    def pstep(self) -> PermutationStep:
        name = self.take("name", "a step name")
        out = PermutationStep(name.text, name.line)
        if self.tok.kind != "(":
            return out
        self.at += 1
        while True:
            if self.tok.kind == "*":
                self.at += 1
                out.blockers.append(Blocker("once"))
            else:
                other = self.take("name", "*, a step name or step notices N").text
                if self.tok.kind == "notices":
                    self.at += 1
                    count = int(self.take("int", "a number of notices").text)
                    out.blockers.append(Blocker("notices", other, count))
                else:
                    out.blockers.append(Blocker("step", other))
            if self.tok.kind == ")":
                self.at += 1
                return out
            self.take(",", ", or )")


def check(spec: Spec, where: str) -> None:
    """The tester's checks after parsing: unique step names, every permutation step and
    blocker known, no step blocking on its own session; unused steps are a warning."""
    steps: dict[str, Step] = {}
    for sess in spec.sessions:
        for st in sess.steps:
            if st.name in steps:
                raise SpecError(f"{where}:{st.line}: duplicate step name: {st.name}")
            steps[st.name] = st
    used: set[str] = set()
    for perm in spec.permutations:
        for ps in perm:
            if ps.name not in steps:
                raise SpecError(
                    f'{where}:{ps.line}: undefined step "{ps.name}" specified in permutation'
                )
            used.add(ps.name)
        names = {ps.name for ps in perm}
        for ps in perm:
            for b in ps.blockers:
                if b.kind == "once":
                    continue
                if b.step not in names:
                    raise SpecError(
                        f'{where}:{ps.line}: undefined blocking step "{b.step}" referenced'
                        f' in permutation step "{ps.name}"'
                    )
                if steps[b.step].session == steps[ps.name].session:
                    raise SpecError(
                        f'{where}:{ps.line}: permutation step "{ps.name}" cannot block on'
                        " its own session"
                    )
    if spec.permutations:
        spec.warnings = [f"unused step name: {n}\n" for n in sorted(steps) if n not in used]


def parse_spec(text: str, where: str = "<spec>") -> Spec:
    """Parse and check a spec's text; `where` (its file name) goes into every error."""
    spec = _Parser(text, where).spec()
    check(spec, where)
    return spec


def read_spec(path: Path) -> Spec:
    """Parse and check the spec file at `path`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: {exc}") from None
    return parse_spec(text, str(path))
