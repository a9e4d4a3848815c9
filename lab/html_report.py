"""`locklab report RUN`: one self-contained HTML page with inline SVG charts.

No network, no external scripts or fonts: charts are SVG drawn here, styles are inline,
and a Content-Security-Policy forbids anything else. One tiny inline script marks the
page as rendered (and counts script errors) so a headless browser test can check it.

Per scenario the page shows: measured beside published (table), outcome counts per
variant beside the published counts, wall time measured vs published, latency
distributions (overall and per outcome), attempts per transfer, server evidence
(deadlock cycle lengths, Redis command counts, counters), the lease timeline (who held
the lock when, by belief and by Redis), invariants and claim verdicts. It renders what a
record has and skips what it lacks. The run's trace and explore records add a picture of
each pinned run they keep (lab/trace_svg.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.diff import servers_text
from lab.output.published_numbers import Published, parse_published, published_of
from lab.output.svg import (
    PUBLISHED_COLOUR,
    WHO_COLOURS,
    bar_chart,
    esc,
    fmt_num,
    latency_chart,
    matrix_chart,
    outcome_chart,
    scale_chart,
    timeline_chart,
    timeline_parts,
    variant_colour,
)
from lab.report import REDIS_HARNESS, measured_text
from lab.results import load_run, read_record, run_folder, write_text
from lab.trace_svg import Picture, draw
from lab.verify import ScenarioVerdicts, load_verdicts, merge_cases, status_of

__all__ = [
    "Published",
    "parse_published",
    "published_of",
    "render",
    "timeline_chart",
    "write_report",
]

Record = Mapping[str, Any]

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
CHECK_SCRIPT = """
(function () {
  var errors = [];
  window.addEventListener('error', function (e) { errors.push(String(e.message)); });
  document.addEventListener('securitypolicyviolation', function (e) {
    errors.push('csp: ' + e.violatedDirective + ' ' + e.blockedURI);
  });
  window.addEventListener('load', function () {
    var d = document.documentElement;
    d.setAttribute('data-svg-count', String(document.querySelectorAll('svg').length));
    d.setAttribute('data-errors', errors.length ? errors.join(' | ') : 'none');
    d.setAttribute('data-rendered', 'ok');
  });
})();
"""
STYLE = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #212121; background: #fafafa; margin: 0; }
main { max-width: 960px; margin: 0 auto; padding: 24px 20px 60px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 0 0 2px; }
h3 { font-size: 15px; margin: 22px 0 6px; color: #424242; }
.meta { color: #616161; font-size: 13px; }
section.scenario { background: #fff; border: 1px solid #e0e0e0; border-radius: 8px;
                   padding: 18px 20px; margin: 22px 0; }
table { border-collapse: collapse; width: 100%; font-size: 13px; margin: 6px 0; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #eeeeee;
         vertical-align: top; }
th { color: #616161; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace;
              font-size: 12px; }
.pub { color: #757575; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px;
         font-weight: 600; white-space: nowrap; }
.held { background: #e8f5e9; color: #1b5e20; }
.not { background: #ffebee; color: #b71c1c; }
.nj { background: #fff8e1; color: #8d6e00; }
.na { background: #f5f5f5; color: #757575; }
.summary { font-size: 16px; margin: 14px 0; }
svg { display: block; max-width: 100%; height: auto; margin: 4px 0 10px; }
svg text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
.note { color: #757575; font-size: 12px; }
ul.inv { margin: 4px 0; padding-left: 18px; }
nav a { margin-right: 12px; }
table.marks { width: auto; }
div.pinned { overflow-x: auto; }
div.pinned svg { max-width: none; }
"""


@dataclass(frozen=True)
class EvidenceRow:
    """One measured quantity across variants, with the document's value where it has one."""

    name: str
    values: Mapping[str, float]  # variant -> value
    published: Mapping[str, float]  # variant -> the document's value


# Names the documents use for a figure -> the evidence rows that measure it.
FIGURE_ALIASES = {"gets": ("redis:get", "redis_get"), "db calls": ("db_calls",)}


def evidence_rows(
    recs: Sequence[Record], pubs: Mapping[str, Published | None]
) -> list[EvidenceRow]:
    """Deadlocks, cycle lengths, Redis command counts and counters, in that order."""
    rows: list[tuple[str, str, dict[str, float]]] = []  # (key, name, values)

    def ev(r: Record) -> Mapping[str, Any]:
        return r.get("evidence") or {}

    if any("pg_stat_deadlocks" in ev(r) for r in recs):
        vals = {str(r["variant"]): float(ev(r).get("pg_stat_deadlocks") or 0) for r in recs}
        if any(vals.values()):
            rows.append(("pg_deadlocks", "PostgreSQL deadlocks (pg_stat_database)", vals))
    lengths = sorted(
        {str(k) for r in recs for k in ((ev(r).get("deadlocks") or {}).get("cycle_lengths") or {})},
        key=lambda k: int(k) if k.isdigit() else 0,
    )
    for k in lengths:
        vals = {
            str(r["variant"]): float(
                ((ev(r).get("deadlocks") or {}).get("cycle_lengths") or {}).get(k, 0)
            )
            for r in recs
        }
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


def marks_table(tl: Mapping[str, Any]) -> str:
    """The numbered events of a timeline, in time order, as a compact table."""
    _, marks, who = timeline_parts(tl)
    if not marks:
        return ""
    unit = str(tl.get("unit", "ms"))
    rows = []
    for n, m in enumerate(marks, start=1):
        w = str(m.get("who"))
        colour = WHO_COLOURS[who.index(w) % len(WHO_COLOURS)]
        rows.append(
            f"<tr><td class='num'>{n}</td><td class='num'>{float(m['t_ms']):.1f} {esc(unit)}</td>"
            f"<td><b style='color:{colour}'>{esc(w)}</b></td><td class='mono'>"
            f"{esc(m.get('label', ''))}</td></tr>"
        )
    return (
        "<table class='marks'><tr><th>#</th><th>t</th><th>who</th><th>event</th></tr>"
        + "".join(rows)
        + "</table>"
    )


# --- page ----------------------------------------------------------------------------


def _badge(v: Mapping[str, Any]) -> str:
    status = status_of(v)
    cls = {"held": "held", "not held": "not", "not judged": "nj"}.get(status, "na")
    word = status.upper() if status in ("not held", "fitted", "not reproduced") else status
    return f'<span class="badge {cls}">{esc(word)}</span>'


def _scenario_claims(
    recs: Sequence[Record], verdicts: ScenarioVerdicts | None
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    if verdicts is not None:
        return list(verdicts.verdicts), list(verdicts.skipped)
    seen: dict[tuple[str, str], Mapping[str, Any]] = {}
    skipped: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in recs:
        for c in r.get("claims", []):
            seen.setdefault((c["id"], c["text"]), c)
        for c in r.get("claims_not_judged", []):
            skipped.setdefault((c["id"], c["text"]), c)
    return list(seen.values()), list(skipped.values())


def _claims_html(claims: Sequence[Mapping[str, Any]], skipped: Sequence[Mapping[str, Any]]) -> str:
    if not claims and not skipped:
        return '<p class="note">No claim was judged on this run.</p>'
    rows = []
    for c in claims:
        trials = c.get("trials")
        t = (
            f"{c['trials_held']}/{len(trials)}"
            if isinstance(trials, list) and len(trials) > 1
            else "1"
        )
        rows.append(
            f"<tr><td class='mono'>{esc(c['id'])}</td><td>{_badge(c)}</td><td class='num'>{t}</td>"
            f"<td>{esc(c['text'])}</td><td class='mono'>{esc(c['measured'])}</td>"
            f"<td class='pub mono'>{esc(c.get('published') or '')}</td></tr>"
        )
    for c in skipped:
        # verify: a claim of another profile; run/compare: a claim these settings can't judge
        badge = f"{'+'.join(c['profiles'])} only" if c.get("profiles") else "not judged here"
        rows.append(
            f"<tr><td class='mono'>{esc(c['id'])}</td><td><span class='badge na'>"
            f"{esc(badge)}</span></td><td class='num'>-</td><td class='pub'>{esc(c['text'])}</td>"
            f"<td class='pub'>{esc(c.get('why') or '')}</td>"
            f"<td class='pub mono'>{esc(c.get('published') or '')}</td></tr>"
        )
    return (
        "<table><tr><th>id</th><th>verdict</th><th>trials</th><th>claim</th>"
        "<th>measured</th><th>published</th></tr>" + "".join(rows) + "</table>"
    )


def scenario_section(sc_id: str, recs: Sequence[Record], verdicts: ScenarioVerdicts | None) -> str:
    first = recs[0]
    variants = [str(r["variant"]) for r in recs]
    knobs = first.get("knobs") or {}
    n = knobs.get("n")
    pubs = {str(r["variant"]): published_of(r, n) for r in recs}
    parts = [f'<section class="scenario" id="{esc(sc_id)}">']
    parts.append(f"<h2>{esc(sc_id)}</h2><div class='meta'>{esc(first.get('title', ''))}</div>")
    knob_line = " ".join(f"{k}={v}" for k, v in knobs.items())
    params = " ".join(f"{k}={v}" for k, v in (first.get("params") or {}).items())
    parts.append(
        f"<div class='meta mono'>{esc(knob_line)}{'  ·  ' + esc(params) if params else ''}</div>"
    )

    # measured vs published
    rows = []
    for r in recs:
        inv = r.get("invariants") or []
        bad = [i for i in inv if not i["held"]]
        inv_s = (
            f"<span class='badge not'>{len(bad)} broken</span>" if bad
            else f"<span class='badge held'>{len(inv)} held</span>" if inv else "-"
        )  # fmt: skip
        lat = r.get("latency_ms") or {}
        p = f"{lat.get('p50', 0):.0f} / {lat.get('p99', 0):.0f}" if lat else "-"
        rows.append(
            f"<tr><td><b>{esc(r['variant'])}</b></td><td class='mono'>{esc(measured_text(r))}</td>"
            f"<td class='num'>{p}</td><td>{inv_s}</td>"
            f"<td class='pub mono'>{esc(r.get('published') or '')}</td></tr>"
        )
    parts.append(
        "<h3>Measured beside published</h3><table><tr><th>variant</th><th>measured</th>"
        "<th>p50 / p99 ms</th><th>invariants</th><th>published</th></tr>"
        + "".join(rows)
        + "</table>"
    )

    # outcome counts
    orows: list[tuple[str, Mapping[str, int], bool]] = []
    for r in recs:
        v = str(r["variant"])
        orows.append((f"{v}", r.get("outcomes") or {}, False))
        pub = pubs.get(v)
        if pub is not None and pub.outcomes:
            orows.append((f"{v} · published", pub.outcomes, True))
    if any(sum(c.values()) for _, c, _ in orows):
        parts.append("<h3>Outcome counts</h3>" + outcome_chart(orows))

    # wall time
    wrows: list[tuple[str, float, str, str]] = []
    for r in recs:
        v = str(r["variant"])
        wrows.append((v, float(r.get("wall_ms", 0)), variant_colour(v, variants), ""))
        pub = pubs.get(v)
        if pub is not None and pub.wall_ms is not None:
            wrows.append((f"{v} · published", pub.wall_ms, PUBLISHED_COLOUR, pub.text))
    parts.append("<h3>Wall time</h3>" + bar_chart(wrows, "ms", "wall time, measured and published"))
    if n is not None and any(p is not None and p.n not in (None, n) for p in pubs.values()):
        parts.append(
            f"<p class='note'>This run used n={esc(n)}; the published numbers were measured at "
            "the document's size, so compare shapes, not absolute values.</p>"
        )

    # latency
    lrows: list[tuple[str, Mapping[str, float], str]] = []
    for r in recs:
        v = str(r["variant"])
        colour = variant_colour(v, variants)
        by = r.get("latency_ms_by_outcome") or {}
        if r.get("latency_ms"):
            lrows.append((f"{v} (all)", r["latency_ms"], colour))
        if len(by) > 1:
            for k, pct in by.items():
                lrows.append((f"{v} · {k}", pct, colour))
    if lrows:
        parts.append(
            "<h3>Latency per actor</h3>" + latency_chart(lrows)
            + "<p class='note'>line: min–max · box: p50–p95 · dot: p50 · tick: p99</p>"
        )  # fmt: skip

    # attempts
    arows: list[tuple[str, float, str, str]] = []
    dist: list[tuple[str, Mapping[str, float], str]] = []
    for r in recs:
        v = str(r["variant"])
        total = (r.get("counters") or {}).get("attempts")
        per = (r.get("samples") or {}).get("attempts_per_transfer") or {}
        if total is None and per:
            total = per.get("sum")
        if total is not None:
            arows.append((v, float(total), variant_colour(v, variants), ""))
            pub = pubs.get(v)
            if pub is not None and pub.attempts is not None:
                arows.append((f"{v} · published", float(pub.attempts), PUBLISHED_COLOUR, pub.text))
        if per:
            dist.append((v, {k: float(per[k]) for k in ("min", "p50", "p95", "p99", "max") if k in per},
                         variant_colour(v, variants)))  # fmt: skip
    if arows:
        parts.append("<h3>Attempts</h3>" + bar_chart(arows, "attempts", "attempts per variant"))
    if dist:
        parts.append(
            "<h3>Attempts per transfer</h3>" + latency_chart(dist, "attempts per transfer")
        )

    # evidence
    ev_rows = evidence_rows(recs, pubs)
    if ev_rows:
        parts.append(
            "<h3>Evidence from the servers</h3>"
            + matrix_chart(ev_rows, variants)
            + "<p class='note'>bars are scaled per row; grey ticks and (numbers) are the "
            "document's published values where it gives them</p>"
        )
    examples = [
        (str(r["variant"]), ((r.get("evidence") or {}).get("deadlocks") or {}).get("example"))
        for r in recs
    ]
    for v, ex in examples:
        if ex and ex.get("waits"):
            hops = " → ".join(
                f"{w.get('pid')} ({w.get('mode')} on {w.get('on')})" for w in ex["waits"]
            )
            parts.append(
                f"<p class='note'>{esc(v)}: one reported cycle: <span class='mono'>{esc(hops)}</span></p>"
            )

    # timelines
    for r in recs:
        tl = (r.get("evidence") or {}).get("timeline")
        if isinstance(tl, Mapping):
            chart = timeline_chart(tl, f"lease timeline, {r['variant']}")
            if chart:
                parts.append(
                    f"<h3>Lease timeline — {esc(r['variant'])}</h3>" + chart + marks_table(tl)
                )

    # invariants
    inv_items = []
    for r in recs:
        for i in r.get("invariants") or []:
            mark = "✓" if i["held"] else "✗"
            cls = "held" if i["held"] else "not"
            inv_items.append(
                f"<li><span class='badge {cls}'>{mark}</span> <b>{esc(r['variant'])}</b>: "
                f"{esc(i['name'])} <span class='note'>({esc(i.get('detail', ''))})</span></li>"
            )
    if inv_items:
        parts.append("<h3>Invariants</h3><ul class='inv'>" + "".join(inv_items) + "</ul>")

    claims, skipped = _scenario_claims(recs, verdicts)
    parts.append("<h3>Claims</h3>" + _claims_html(claims, skipped))
    parts.append("</section>")
    return "".join(parts)


def _variant_order(r: Record) -> tuple[str, int, str]:
    """Within a scenario: buggy first, its siblings, then fixed, then the other fixes."""
    v = str(r.get("variant"))
    rank = 0 if v == "buggy" else 1 if "buggy" in v else 2 if v == "fixed" else 3
    return (str(r.get("scenario")), rank, v)


def bench_section(bench: Mapping[str, Any]) -> str:
    """The scale curve of a `bench --scale` record, with its table."""
    points = list(bench.get("points") or [])
    rows = "".join(
        f"<tr><td>{esc(p['n'])}</td><td>{esc(p.get('via', ''))}</td>"
        f"<td>{fmt_num(float(p['lab_median_ms']))}</td>"
        f"<td>{fmt_num(float(p['pgbench_median_ms']))}</td><td>{float(p['ratio']):.3f}</td>"
        f"<td>{float(p['target_ratio']):.2f}</td>"
        f"<td>{'within' if float(p['ratio']) <= float(p['target_ratio']) else 'ABOVE'}</td></tr>"
        for p in points
    )
    return (
        "<section id='bench-scale'><h2>bench --scale: fixed checkout, lab / pgbench</h2>"
        f"<p class='note'>medians of {esc(bench.get('rounds', '?'))} rounds per side; "
        f"reference: {esc(bench.get('pgbench', 'pgbench'))}</p>"
        + scale_chart(points)
        + "<table><tr><th>n</th><th>via</th><th>lab ms</th><th>pgbench ms</th>"
        "<th>ratio</th><th>target</th><th></th></tr>" + rows + "</table></section>"
    )


def pinned_section(pictures: Sequence[Picture]) -> str:
    """The pinned runs of the folder's trace and explore records, a picture each."""
    if not pictures:
        return ""
    # each says what it is (its caption), at its own size: shrunk to the column, a long
    # run's labels would be too small to read, so the picture scrolls instead
    drawn = "".join(f"<div class='pinned'>{draw([p])}</div>" for p in pictures)
    return "<section class='scenario' id='pinned'><h2>Pinned runs</h2>" + drawn + "</section>"


def render(
    records: Sequence[Record],
    run_id: str,
    verdicts: Sequence[ScenarioVerdicts] | None = None,
    bench: Mapping[str, Any] | None = None,
    pinned: Sequence[Picture] = (),
) -> str:
    """The whole page as one string (pure: records in, HTML out)."""
    by: dict[str, list[Record]] = {}
    for r in sorted(records, key=_variant_order):
        by.setdefault(str(r["scenario"]), []).append(r)
    vmap = {v.scenario: v for v in merge_cases(verdicts or [])}
    first = records[0] if records else {}
    lab = first.get("lab") or {}
    started = min((str(r.get("started_at", "")) for r in records), default="")
    all_claims = []
    for sc_id, recs in by.items():
        cl, _ = _scenario_claims(recs, vmap.get(sc_id))
        all_claims += cl
    held = sum(1 for c in all_claims if status_of(c) == "held")
    not_held = sum(1 for c in all_claims if status_of(c) == "not held")
    other = len(all_claims) - held - not_held
    profile = (first.get("verify") or {}).get("profile")
    nav = " ".join(f'<a href="#{esc(s)}">{esc(s)}</a>' for s in by)
    overview = []
    for sc_id, recs in by.items():
        cl, _ = _scenario_claims(recs, vmap.get(sc_id))
        statuses = [status_of(c) for c in cl]
        h, bad = statuses.count("held"), statuses.count("not held")
        badge = (
            f"<span class='badge {'not' if bad else 'held'}'>{h}/{h + bad} held</span>"
            if h + bad
            else "<span class='badge na'>no claims judged</span>"
        )
        if len(cl) > h + bad:
            badge += f" <span class='note'>+{len(cl) - h - bad} not judged or not exercised</span>"
        outs = "<br>".join(
            f"<b>{esc(r['variant'])}</b> <span class='mono'>{esc(measured_text(r))}</span>"
            for r in recs
        )
        overview.append(
            f"<tr><td><a href='#{esc(sc_id)}'>{esc(sc_id)}</a></td><td>{outs}</td><td>{badge}</td></tr>"
        )
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    summary_cls = "held" if not_held == 0 else "not"
    head = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>locklab run {esc(run_id)}</title><style>{STYLE}</style>"
        f"<script>{CHECK_SCRIPT}</script></head><body><main>"
    )
    header = (
        f"<h1>locklab run {esc(run_id)}</h1>"
        f"<div class='meta'>started {esc(started)} · servers: {esc(servers_text(first))} · "
        f"lab {esc(lab.get('version', '?'))} (commit {esc(lab.get('git_commit') or '?')}), "
        f"Python {esc(lab.get('python', '?'))}"
        + (f" · verify profile <b>{esc(profile)}</b>" if profile else "")
        + "</div>"
        f"<p class='summary'><span class='badge {summary_cls}'>{held} claims held, {not_held} not held</span>"
        + (f" <span class='note'>({other} not judged or not exercised)</span>" if other else "")
        + "</p>"
        f"<nav>{nav}</nav>"
        "<table><tr><th>scenario</th><th>measured</th><th>claims</th></tr>"
        + "".join(overview)
        + "</table>"
    )
    if not records and bench is not None:  # a bench run: no scenario, no claims to count
        header = (
            f"<h1>locklab run {esc(run_id)}</h1><div class='meta'>a <span class='mono'>"
            f"locklab bench --scale</span> record, lab commit {esc(bench.get('git_commit') or '?')}"
            "</div>"
        )
    if not records and bench is None and pinned:  # a trace or an explore: no claims to count
        header = f"<h1>locklab run {esc(run_id)}</h1><div class='meta'>pinned runs</div>"
    body = "".join(scenario_section(sc, recs, vmap.get(sc)) for sc, recs in by.items())
    if bench is not None:
        body += bench_section(bench)
    body += pinned_section(pinned)
    footer = (
        f"<p class='note'>Generated {generated} by <span class='mono'>locklab report</span>. "
        "Published numbers: Node 24 + node-postgres on PostgreSQL 17.11 "
        "(deadlock_timeout=1s) and Redis 7.4.11, as printed in the source documents.</p>"
    )
    return head + header + body + footer + "</main></body></html>\n"


def write_report(ref: str, out: Path | None = None) -> Path:
    """Render a recorded run (its id or folder) to `out`, default `<run folder>/report.html`."""
    from lab.pinned import drawn_runs

    folder = run_folder(ref)
    scale = folder / "bench" / "scale.json"
    bench = read_record(scale) if scale.is_file() else None
    pinned = drawn_runs(folder)
    top = any(folder.glob("*.json"))
    records = load_run(str(folder)) if top or (bench is None and not pinned) else []
    page = render(records, folder.name, load_verdicts(folder), bench, pinned)
    return write_text(out or folder / "report.html", page)
