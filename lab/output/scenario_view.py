"""A scenario's section of `locklab report`'s page as data (part of the view model that
lab.output.report_view completes with the page around the sections).

From one scenario's records and verdicts: the variants measured beside published, the
charts (drawn by lab.output.svg, carried as `Svg`), the servers' evidence, the lease
timelines and their events, the invariants and the claims. Verdict counts are
lab.verify's `summarize`, not counted again here. Pure: records in, frozen dataclasses out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.core.records import (
    Record,
    Verdict,
)
from lab.output import svg as charts
from lab.output.console import REDIS_HARNESS, measured_text
from lab.output.published_numbers import Published, published_of
from lab.output.verdicts import WORDS, status_text
from lab.verify import ScenarioVerdicts, Summary, status_of, summarize


@dataclass(frozen=True)
class Svg:
    """A drawn chart or picture: markup the template inserts as it is (`__html__`)."""

    markup: str

    def __html__(self) -> str:
        return self.markup


def drawn(markup: str) -> Svg | None:
    return Svg(markup) if markup else None


@dataclass(frozen=True)
class Badge:
    word: str
    tone: str  # held | not | nj | na: the badge's colour


def verdict_badge(v: Mapping[str, Any]) -> Badge:
    status = status_of(v)
    tone = {"held": "held", "not held": "not", "not judged": "nj"}.get(status, "na")
    return Badge(status_text(v), tone)


@dataclass(frozen=True)
class Counts:
    """Verdict counts as lab.verify.summarize made them, each status on its own: held,
    not held, fitted, published numbers not reproduced, not judged, not exercised."""

    held: int
    not_held: int
    fitted: int = 0
    not_reproduced: int = 0
    not_judged: int = 0
    not_exercised: int = 0

    @classmethod
    def of(cls, s: Summary) -> Counts:
        return cls(s.held, s.not_held, s.fitted, s.gaps, s.not_judged, s.not_exercised)

    @property
    def other(self) -> int:
        return self.fitted + self.not_reproduced + self.not_judged + self.not_exercised

    @property
    def rest(self) -> str:
        """The statuses besides held and not held, each by its word: "1 FITTED, 2 NOT
        JUDGED" ("" when there are none)."""
        counts = (
            (self.fitted, "fitted"),
            (self.not_reproduced, "not reproduced"),
            (self.not_judged, "not judged"),
            (self.not_exercised, "not exercised"),
        )
        return ", ".join(f"{n} {WORDS[status][0]}" for n, status in counts if n)

    @property
    def judged(self) -> int:
        return self.held + self.not_held


@dataclass(frozen=True)
class ClaimRow:
    id: str
    badge: Badge
    trials: str
    text: str
    measured: str  # for a claim not judged here: why
    published: str
    judged: bool  # False: a claim of another profile, or one these settings cannot judge
    # verify --counterfactual: what the claim gave there, and the counterfactual's kind
    # ("failed (run)", "held (record-edit)": it cannot fail); "" when none was judged
    counterfactual: str = ""


@dataclass(frozen=True)
class VariantRow:
    """One variant's line in "Measured beside published" (and in the overview)."""

    variant: str
    measured: str
    p50_p99: str
    invariants: Badge | None
    published: str


@dataclass(frozen=True)
class Chart:
    heading: str
    svg: Svg | None
    note: str = ""  # a line under the chart


@dataclass(frozen=True)
class EvidenceRow:
    """One measured quantity across variants, with the document's value where it has one."""

    name: str
    values: Mapping[str, float]  # variant -> value
    published: Mapping[str, float]  # variant -> the document's value


@dataclass(frozen=True)
class Cycle:
    variant: str
    hops: str  # "pid (mode on what) → ..."


@dataclass(frozen=True)
class Mark:
    """A numbered event under a lease timeline."""

    n: int
    t: str
    who: str
    colour: str
    label: str


@dataclass(frozen=True)
class Timeline:
    variant: str
    svg: Svg
    marks: tuple[Mark, ...]


@dataclass(frozen=True)
class InvariantItem:
    variant: str
    name: str
    detail: str
    held: bool


@dataclass(frozen=True)
class ScenarioSection:
    id: str
    title: str
    knobs: str
    params: str
    variants: tuple[VariantRow, ...]
    charts: tuple[Chart, ...]  # outcomes, wall time, latency, attempts, evidence: those drawn
    evidence: tuple[EvidenceRow, ...]
    cycles: tuple[Cycle, ...]
    timelines: tuple[Timeline, ...]
    invariants: tuple[InvariantItem, ...]
    claims: tuple[ClaimRow, ...]
    counts: Counts
    summary: Summary


# --- evidence -------------------------------------------------------------------------


# Names the documents use for a figure -> the evidence rows that measure it.
FIGURE_ALIASES = {"gets": ("redis:get", "redis_get"), "db calls": ("db_calls",)}


def evidence_rows(
    recs: Sequence[Record], pubs: Mapping[str, Published | None]
) -> list[EvidenceRow]:
    """Deadlocks, cycle lengths, Redis command counts and counters, in that order."""
    rows: list[tuple[str, str, dict[str, float]]] = []  # (key, name, values)

    def ev(r: Record) -> Mapping[str, Any]:
        return r.get("evidence") or {}

    def cycles(r: Record) -> Mapping[str, Any]:
        return (ev(r).get("deadlocks") or {}).get("cycle_lengths") or {}

    if any("pg_stat_deadlocks" in ev(r) for r in recs):
        vals = {str(r["variant"]): float(ev(r).get("pg_stat_deadlocks") or 0) for r in recs}
        if any(vals.values()):
            rows.append(("pg_deadlocks", "PostgreSQL deadlocks (pg_stat_database)", vals))
    lengths = sorted(
        {str(k) for r in recs for k in cycles(r)}, key=lambda k: int(k) if k.isdigit() else 0
    )
    for k in lengths:
        vals = {str(r["variant"]): float(cycles(r).get(k, 0)) for r in recs}
        rows.append((f"cycle:{k}", f"deadlock cycles of {k} processes (server log)", vals))
    cmds = sorted(
        {c for r in recs for c in (ev(r).get("redis_commandstats") or {})} - REDIS_HARNESS
    )
    for c in cmds:
        vals = {
            str(r["variant"]): float((ev(r).get("redis_commandstats") or {}).get(c, 0))
            for r in recs
        }
        rows.append((f"redis:{c}", f"Redis {c.upper()} calls", vals))
    names = sorted({k for r in recs for k in (r.get("counters") or {}) if k != "attempts"})
    for k in names:
        vals = {}
        for r in recs:
            x = (r.get("counters") or {}).get(k)
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                vals[str(r["variant"])] = float(x)
        if vals:
            rows.append((k, k.replace("_", " "), vals))
    out = []
    for key, name, vals in rows:
        published = {}
        for v, pub in pubs.items():
            for fig, value in (pub.figures if pub else {}).items():
                for alias, keys in FIGURE_ALIASES.items():
                    if fig.lower().endswith(alias) and key in keys:  # "redis GETs" -> "gets"
                        published[v] = value
        out.append(EvidenceRow(name, vals, published))
    return out


def marks_of(tl: Mapping[str, Any]) -> tuple[Mark, ...]:
    """The numbered events of a timeline, in time order (the numbers its chart shows)."""
    _, marks, who = charts.timeline_parts(tl)
    unit = str(tl.get("unit", "ms"))
    return tuple(
        Mark(
            n,
            f"{float(m['t_ms']):.1f} {unit}",
            str(m.get("who")),
            charts.who_colour(str(m.get("who")), who),
            str(m.get("label", "")),
        )
        for n, m in enumerate(marks, start=1)
    )


# --- claims ---------------------------------------------------------------------------


def record_verdicts(sc_id: str, recs: Sequence[Record]) -> ScenarioVerdicts:
    """The claims a plain run's records carry, as verify's shape (for a run without
    verify's verdicts): each claim once, judged or not."""
    seen: dict[tuple[str, str], Verdict] = {}
    skipped: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in recs:
        for c in r.get("claims", []):
            seen.setdefault((c["id"], c["text"]), c)
        for n in r.get("claims_not_judged", []):
            skipped.setdefault((n["id"], n["text"]), n)
    first = recs[0] if recs else {}
    return ScenarioVerdicts(
        scenario=sc_id,
        title=str(first.get("title", "")),
        profile="",
        knobs=dict(first.get("knobs") or {}),
        params=dict(first.get("params") or {}),
        trials=1,
        verdicts=list(seen.values()),
        skipped=[dict(c) for c in skipped.values()],
    )


def _counterfactual(v: Mapping[str, Any]) -> str:
    """`failed (run)`, `held (record-edit)`, `none: why (none)`, or "" when not judged."""
    said = str(v.get("counterfactual") or "")
    kind = str(v.get("counterfactual_kind") or "")
    return f"{said} ({kind})" if said and kind else said


def claim_rows(shown: ScenarioVerdicts) -> tuple[ClaimRow, ...]:
    rows = []
    for c in shown.verdicts:
        trials = c.get("trials")
        t = (
            f"{c['trials_held']}/{len(trials)}"
            if isinstance(trials, list) and len(trials) > 1
            else "1"
        )
        rows.append(
            ClaimRow(
                c["id"],
                verdict_badge(c),
                t,
                c["text"],
                str(c.get("measured", "")),
                str(c.get("published") or ""),
                judged=True,
                counterfactual=_counterfactual(c),
            )
        )
    for s in shown.skipped:
        # verify: a claim of another profile; run/compare: a claim these settings can't judge
        word = f"{'+'.join(s['profiles'])} only" if s.get("profiles") else "not judged here"
        rows.append(
            ClaimRow(
                s["id"],
                Badge(word, "na"),
                "-",
                s["text"],
                str(s.get("why") or ""),
                str(s.get("published") or ""),
                judged=False,
            )
        )
    return tuple(rows)


# --- a scenario -----------------------------------------------------------------------


def _variant_row(r: Record) -> VariantRow:
    inv = r.get("invariants") or []
    bad = [i for i in inv if not i["held"]]
    badge = (
        Badge(f"{len(bad)} broken", "not")
        if bad
        else Badge(f"{len(inv)} held", "held")
        if inv
        else None
    )
    lat = r.get("latency_ms") or {}
    p = f"{lat.get('p50', 0):.0f} / {lat.get('p99', 0):.0f}" if lat else "-"
    return VariantRow(str(r["variant"]), measured_text(r), p, badge, str(r.get("published") or ""))


def _charts(recs: Sequence[Record], pubs: Mapping[str, Published | None]) -> list[Chart]:
    variants = [str(r["variant"]) for r in recs]
    n = (recs[0].get("knobs") or {}).get("n")
    out = []

    def colour(v: str) -> str:
        return charts.variant_colour(v, variants)

    orows: list[tuple[str, Mapping[str, int], bool]] = []
    for r in recs:
        v = str(r["variant"])
        orows.append((v, r.get("outcomes") or {}, False))
        pub = pubs.get(v)
        if pub is not None and pub.outcomes:
            orows.append((f"{v} · published", pub.outcomes, True))
    if any(sum(c.values()) for _, c, _ in orows):
        out.append(Chart("Outcome counts", drawn(charts.outcome_chart(orows))))

    wrows: list[tuple[str, float, str, str]] = []
    for r in recs:
        v = str(r["variant"])
        wrows.append((v, float(r.get("wall_ms", 0)), colour(v), ""))
        pub = pubs.get(v)
        if pub is not None and pub.wall_ms is not None:
            wrows.append((f"{v} · published", pub.wall_ms, charts.PUBLISHED_COLOUR, pub.text))
    size_note = ""
    if n is not None and any(p is not None and p.n not in (None, n) for p in pubs.values()):
        size_note = (
            f"This run used n={n}; the published numbers were measured at the document's "
            "size, so compare shapes, not absolute values."
        )
    wall = charts.bar_chart(wrows, "ms", "wall time, measured and published")
    out.append(Chart("Wall time", drawn(wall), size_note))

    lrows: list[tuple[str, Mapping[str, float], str]] = []
    for r in recs:
        v = str(r["variant"])
        by = r.get("latency_ms_by_outcome") or {}
        if r.get("latency_ms"):
            lrows.append((f"{v} (all)", r["latency_ms"], colour(v)))
        if len(by) > 1:
            lrows += [(f"{v} · {k}", pct, colour(v)) for k, pct in by.items()]
    if lrows:
        note = "line: min–max · box: p50–p95 · dot: p50 · tick: p99"
        out.append(Chart("Latency per actor", drawn(charts.latency_chart(lrows)), note))

    arows: list[tuple[str, float, str, str]] = []
    dist: list[tuple[str, Mapping[str, float], str]] = []
    for r in recs:
        v = str(r["variant"])
        total: float | None = (r.get("counters") or {}).get("attempts")
        per = (r.get("samples") or {}).get("attempts_per_transfer") or {}
        if total is None and per:
            total = per.get("sum")
        if total is not None:
            arows.append((v, float(total), colour(v), ""))
            pub = pubs.get(v)
            if pub is not None and pub.attempts is not None:
                arows.append(
                    (f"{v} · published", float(pub.attempts), charts.PUBLISHED_COLOUR, pub.text)
                )
        if per:
            keys = ("min", "p50", "p95", "p99", "max")
            dist.append((v, {k: float(per[k]) for k in keys if k in per}, colour(v)))
    if arows:
        chart = charts.bar_chart(arows, "attempts", "attempts per variant")
        out.append(Chart("Attempts", drawn(chart)))
    if dist:
        chart = charts.latency_chart(dist, "attempts per transfer")
        out.append(Chart("Attempts per transfer", drawn(chart)))
    return out


def scenario_section(
    sc_id: str, recs: Sequence[Record], shown: ScenarioVerdicts, counted: Sequence[ScenarioVerdicts]
) -> ScenarioSection:
    """One scenario's section: `shown` the verdicts listed (cases folded in, lab.verify's
    merge_cases), `counted` the same verdicts as verify summarized them."""
    first = recs[0]
    variants = [str(r["variant"]) for r in recs]
    knobs = first.get("knobs") or {}
    pubs = {str(r["variant"]): published_of(r, knobs.get("n")) for r in recs}
    section_charts = _charts(recs, pubs)
    ev_rows = evidence_rows(recs, pubs)
    if ev_rows:
        note = (
            "bars are scaled per row; grey ticks and (numbers) are the document's published "
            "values where it gives them"
        )
        section_charts.append(
            Chart("Evidence from the servers", drawn(charts.matrix_chart(ev_rows, variants)), note)
        )
    cycles = []
    for r in recs:
        ex = ((r.get("evidence") or {}).get("deadlocks") or {}).get("example")
        if ex and ex.get("waits"):
            hops = " → ".join(
                f"{w.get('pid')} ({w.get('mode')} on {w.get('on')})" for w in ex["waits"]
            )
            cycles.append(Cycle(str(r["variant"]), hops))
    timelines = []
    for r in recs:
        tl = (r.get("evidence") or {}).get("timeline")
        if isinstance(tl, Mapping):
            chart = charts.timeline_chart(tl, f"lease timeline, {r['variant']}")
            if chart:
                timelines.append(Timeline(str(r["variant"]), Svg(chart), marks_of(tl)))
    invariants = tuple(
        InvariantItem(str(r["variant"]), str(i["name"]), str(i.get("detail", "")), bool(i["held"]))
        for r in recs
        for i in r.get("invariants") or []
    )
    summary = summarize(counted, "")
    return ScenarioSection(
        id=sc_id,
        title=str(first.get("title", "")),
        knobs=" ".join(f"{k}={v}" for k, v in knobs.items()),
        params=" ".join(f"{k}={v}" for k, v in (first.get("params") or {}).items()),
        variants=tuple(_variant_row(r) for r in recs),
        charts=tuple(section_charts),
        evidence=tuple(ev_rows),
        cycles=tuple(cycles),
        timelines=tuple(timelines),
        invariants=invariants,
        claims=claim_rows(shown),
        counts=Counts.of(summary),
        summary=summary,
    )
