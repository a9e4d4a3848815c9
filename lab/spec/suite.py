"""A folder of isolation specs run the way ``pg_isolation_regress`` runs PostgreSQL's own
suite, each compared with its expected output: ``locklab spec-suite DIR``.

The folder is laid out like ``src/test/isolation``: ``specs/NAME.spec``,
``expected/NAME.out`` (and alternates ``NAME_1.out`` ...), and optionally a schedule
(``isolation_schedule``: lines ``test: NAME ...``) that says which specs and in which
order; without one, every spec in name order. Each connection logs in as
``pg_isolation_regress`` makes libpq log in: application_name ``isolation/NAME`` (the
tester appends ``/SESSION``), time zone America/Los_Angeles, date style ``Postgres, MDY``,
``-c intervalstyle=postgres_verbose``, messages in English.

Lanes: specs run side by side, each lane on a database of its own (reused from spec to
spec, as the tester reuses its one database; made again after a spec the tester gave up
on, whose teardown never ran). A spec that touches what every database
shares (roles, databases, tablespaces, or the suite database's name) runs alone, after
the lanes, on a database named as the tester names its own (``isolation_regression``,
dropped first if it is there, as pg_regress drops it).
A spec is skipped, for one of a fixed list of reasons, when the server cannot run it: it
creates an extension the server does not have, it needs injection points, or a debug
build. Everything else is run and is ``identical`` (to its expected file or an
alternate) or ``differs`` (its diff is kept).
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab.errors import LabError
from lab.spec.databases import Databases
from lab.spec.expected import compare_expected
from lab.spec.parse import Spec, SpecError, read_spec
from lab.spec.run import Stopped, run_spec_report
from lab.spec.wire import PgConn

SCHEDULE = "isolation_schedule"
DBNAME = "isolation_regression"  # pg_isolation_regress's --dbname default
# What pg_regress puts in every connection's environment (PGTZ, PGDATESTYLE, PGOPTIONS).
STARTUP = {
    "TimeZone": "America/Los_Angeles",
    "datestyle": "Postgres, MDY",
    "options": "-c intervalstyle=postgres_verbose -c lc_messages=C",
}
NEEDS_EXTENSION = "needs an extension"
NEEDS_INJECTION_POINT = "needs an injection point"
NEEDS_DEBUG_BUILD = "needs a debug build"
SKIP_REASONS = (NEEDS_EXTENSION, NEEDS_INJECTION_POINT, NEEDS_DEBUG_BUILD)
_EXTENSION = re.compile(r"create\s+extension\s+(?:if\s+not\s+exists\s+)?\"?([\w-]+)", re.I)
_SHARED = re.compile(
    r"\b(?:create|drop|alter)\s+(?:role|user|group|database|tablespace)\b|\bon\s+database\b",
    re.I,
)
_DEBUG_ONLY = re.compile(r"\bdebug_discard_caches\s*(?:=|to)\s*[1-9]", re.I)


@dataclass
class SpecOutcome:
    name: str
    status: str  # identical | differs | skipped
    why: str = ""  # a skip's reason (one of SKIP_REASONS, and what), a difference's file
    expected: str = ""  # the expected file it is identical to (an alternate's name too)
    exit_code: int = 0
    wall_s: float = 0.0
    alone: bool = False  # ran after the lanes, by itself


@dataclass
class SuiteResult:
    folder: str
    lanes: int
    wall_s: float
    outcomes: list[SpecOutcome] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)  # name -> what was printed
    diffs: dict[str, str] = field(default_factory=dict)  # name -> unified diff

    def counts(self) -> dict[str, int]:
        out = {"identical": 0, "differs": 0, "skipped": 0}
        for o in self.outcomes:
            out[o.status] += 1
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "kind": "spec-suite",
            "folder": self.folder,
            "lanes": self.lanes,
            "wall_s": round(self.wall_s, 3),
            "counts": self.counts(),
            "specs": [asdict(o) for o in self.outcomes],
        }


def suite_names(folder: Path) -> list[str]:
    """The specs to run, in order: the schedule's, else every spec by name."""
    if not (folder / "specs").is_dir():
        raise LabError(f"{folder}: no specs/ folder (laid out like src/test/isolation)")
    schedule = folder / SCHEDULE
    if not schedule.is_file():
        names = sorted(p.stem for p in (folder / "specs").glob("*.spec"))
        if not names:
            raise LabError(f"{folder}/specs: no .spec files")
        return names
    names = []
    for number, line in enumerate(schedule.read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] != "test:" or len(words) < 2:
            raise LabError(f"{schedule}:{number}: expected 'test: NAME ...'")
        names += words[1:]
    for name in names:
        if not (folder / "specs" / f"{name}.spec").is_file():
            raise LabError(f"{schedule}: no specs/{name}.spec")
    return names


def skip_reason(text: str, extensions: set[str], debug_build: bool) -> str:
    """Why the server cannot run a spec (a reason of SKIP_REASONS), or ""."""
    wanted = [e.lower() for e in _EXTENSION.findall(text)]
    if "injection_points" in wanted or "injection_points_attach" in text:
        return NEEDS_INJECTION_POINT
    missing = [e for e in wanted if e not in extensions]
    if missing:
        return f"{NEEDS_EXTENSION} ({', '.join(missing)})"
    if _DEBUG_ONLY.search(text) and not debug_build:
        return NEEDS_DEBUG_BUILD
    return ""


def runs_alone(text: str, dbname: str = DBNAME) -> bool:
    """A spec that touches what every database shares, or names the suite's database."""
    return bool(_SHARED.search(text)) or re.search(rf"\b{re.escape(dbname)}\b", text) is not None


def _expected_of(folder: Path, name: str) -> list[Path]:
    first = folder / "expected" / f"{name}.out"
    return [first, *sorted((folder / "expected").glob(f"{name}_[0-9]*.out"))]


def _server_facts(dsn: str) -> tuple[set[str], bool]:
    conn = PgConn(dsn)
    try:
        exts = conn.execute("SELECT name FROM pg_available_extensions")
        debug = conn.execute("SHOW debug_assertions")
    finally:
        conn.close()
    names = {row[0] for row in exts.rows} if exts is not None and exts.kind == "tuples" else set()
    on = debug is not None and debug.kind == "tuples" and debug.rows[0][0] == "on"
    return {n for n in names if n is not None}, on


def run_suite(
    folder: Path,
    dsn: str,
    *,
    lanes: int = 4,
    names: Sequence[str] | None = None,
    on_done: Callable[[SpecOutcome], None] | None = None,
) -> SuiteResult:
    """Run the folder's specs in `lanes` lanes on the PostgreSQL at `dsn`, compare each with
    its expected output. A bad spec is a `SpecError` (one line) before anything runs."""
    if lanes < 1:
        raise LabError(f"--lanes {lanes}: must be at least 1")
    names = list(names) if names is not None else suite_names(folder)
    specs = {n: read_spec(folder / "specs" / f"{n}.spec") for n in names}
    texts = {n: (folder / "specs" / f"{n}.spec").read_text(errors="replace") for n in names}
    skipped, alone, shared = _triage(names, texts, dsn)
    run = _SuiteRun(folder, dsn, specs, SuiteResult(str(folder), lanes, 0.0), on_done)
    start = time.monotonic()
    dbs = Databases(dsn)
    try:
        _run_lanes(run, dbs, shared, lanes)
        _run_alone(run, dbs, alone)
    except Stopped:
        raise KeyboardInterrupt from None
    finally:
        run.stop.set()
        dbs.close()
    for name, why in skipped.items():
        run.report(SpecOutcome(name, "skipped", why=why))
    run.result.outcomes = [run.done[n] for n in names]
    run.result.wall_s = time.monotonic() - start
    return run.result


def _triage(
    names: Sequence[str], texts: dict[str, str], dsn: str
) -> tuple[dict[str, str], list[str], list[str]]:
    """The specs the server cannot run (and why), those that run alone, those for the lanes."""
    extensions, debug_build = _server_facts(dsn)
    skipped = {n: why for n in names if (why := skip_reason(texts[n], extensions, debug_build))}
    alone = [n for n in names if n not in skipped and runs_alone(texts[n])]
    shared = [n for n in names if n not in skipped and n not in alone]
    return skipped, alone, shared


@dataclass
class _SuiteRun:
    """What a suite's lanes share: the specs, the result they fill, one lock, one stop."""

    folder: Path
    dsn: str
    specs: dict[str, Spec]
    result: SuiteResult
    on_done: Callable[[SpecOutcome], None] | None
    done: dict[str, SpecOutcome] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def one(self, name: str, database: str, by_itself: bool) -> int:
        """Run one spec on `database`, keep its output and diff; the tester's exit code."""
        t0 = time.monotonic()
        startup = {**STARTUP, "application_name": f"isolation/{name}"}
        text, code, _ = run_spec_report(
            self.specs[name], self.dsn, database=database, startup=startup, stop=self.stop
        )
        same, diff = compare_expected(text, _expected_of(self.folder, name))
        outcome = SpecOutcome(
            name,
            "identical" if same is not None else "differs",
            expected=same.name if same is not None else "",
            exit_code=code,
            wall_s=round(time.monotonic() - t0, 3),
            alone=by_itself,
        )
        with self.lock:
            self.result.outputs[name] = text
            if same is None:
                self.result.diffs[name] = diff
            self.done[name] = outcome
        if self.on_done is not None:
            self.on_done(outcome)
        return code

    def report(self, outcome: SpecOutcome) -> None:
        """Keep an outcome that was not run (a skip) and tell `on_done`."""
        self.done[outcome.name] = outcome
        if self.on_done is not None:
            self.on_done(outcome)


def _run_lanes(run: _SuiteRun, dbs: Databases, shared: Sequence[str], lanes: int) -> None:
    """The shared specs, taken in order by up to `lanes` threads, each on its own database."""
    queue = list(shared)
    tag = secrets.token_hex(3)
    lane_dbs = [dbs.make(f"locklab_suite_{tag}_{k}") for k in range(min(lanes, len(queue)))]

    def lane(database: str) -> None:
        while not run.stop.is_set():
            with run.lock:
                if not queue:
                    return
                name = queue.pop(0)
            if run.one(name, database, False):  # the tester gave up: no teardown ran
                with run.lock:
                    dbs.remake(database)

    with ThreadPoolExecutor(max_workers=max(1, len(lane_dbs))) as pool:
        futures = [pool.submit(lane, db) for db in lane_dbs]
        try:
            finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in finished:
                f.result()  # a lane's exception (a server gone) ends the suite
        except BaseException:
            run.stop.set()  # Ctrl-C, or one lane failed: the others stop at their next look
            raise


def _run_alone(run: _SuiteRun, dbs: Databases, alone: Sequence[str]) -> None:
    """The specs that touch what every database shares, one by one on the tester's database."""
    if not alone:
        return
    database = dbs.make(DBNAME, replace=True)
    for name in alone:
        if run.one(name, database, True):
            dbs.remake(database)


__all__ = ["SKIP_REASONS", "SpecError", "SpecOutcome", "SuiteResult", "run_suite"]


def table_lines(result: SuiteResult) -> list[str]:
    """The suite as a table: one line per spec that is not identical, then the counts."""
    lines = [f"{'spec':<40} {'result':<10} {'s':>6}  why"]
    for o in result.outcomes:
        if o.status != "identical":
            why = o.why or f"{o.name}.diff"
            lines.append(f"{o.name:<40} {o.status:<10} {o.wall_s:>6.2f}  {why}")
    c = result.counts()
    lines.append(
        f"{len(result.outcomes)} specs: {c['identical']} identical, {c['differs']} differ, "
        f"{c['skipped']} skipped; {result.wall_s:.1f} s wall in {result.lanes} lanes"
    )
    return lines


def write_results(result: SuiteResult, folder: Path) -> Path:
    """The record (suite.json), and each spec's output and diff, in `folder`."""
    from lab.core.results import write_json, write_text

    for name, text in result.outputs.items():
        write_text(folder / f"{name}.out", text)
    for name, diff in result.diffs.items():
        write_text(folder / f"{name}.diff", diff)
    return write_json(folder / "suite.json", result.to_json())
