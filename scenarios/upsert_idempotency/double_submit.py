"""upsert-idempotency, the claims on the pinned double submit (both requests look before
either inserts): `_double_submit` judges the canonical schedule's answers, waits, printed
results and broken invariants; `_step_error` judges every interleaving for a step that fails
with 23505 (LC-20: MERGE in some, ON CONFLICT in none); `needs_17` makes a claim not judged
when buggy-merge ran on a server older than PostgreSQL 17.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from lab.core.claims import Claim, NotJudged, Record
from lab.core.records import PinnedRunJson
from lab.pinned import RC, on_canonical
from scenarios.upsert_idempotency.upsert_idempotency import NEEDS_17

CANON = "double-submit"


def _lines(run: Mapping[str, Any], step: str) -> list[str]:
    """The transcript lines of `step` ("s2 insert"), its <... completed> line included."""
    return [x for x in str(run["transcript"]).splitlines() if x.startswith(f"{step} ")]


def _said(run: Mapping[str, Any], step: str, text: str) -> bool:
    return any(text in x for x in _lines(run, step))


def _double_submit(
    cid: str,
    variant: str,
    text: str,
    outcomes: Mapping[str, str],
    waited: tuple[str, ...],
    shows: tuple[tuple[str, str], ...],
    broken: tuple[str, ...],
    published: str = "",
) -> Claim:
    """The canonical double submit of `variant`: each session's answer, the steps the
    server showed blocked, what some steps printed (step, text) and which invariants broke."""

    def check(run: PinnedRunJson) -> tuple[bool, str]:
        got = " ".join(f"{s}={o}" for s, o in run["outcomes"].items())
        bad = [i["name"] for i in run["invariants"] if not i["held"]]
        seen = [f"{step}: {'yes' if _said(run, step, t) else 'NO'} {t!r}" for step, t in shows]
        held = (
            run["outcomes"] == dict(outcomes)
            and all(w in run["waited"] for w in waited)
            and all(_said(run, step, t) for step, t in shows)
            and sorted(bad) == sorted(broken)
        )
        return held, (
            f"{CANON}: {got}; waited: {', '.join(run['waited']) or 'none'}; "
            f"{'; '.join(seen)}; broken: {', '.join(bad) or 'none'}"
        )

    return on_canonical(cid, variant, CANON, text, check, published=published)


def _step_error(cid: str, text: str, published: str) -> Claim:
    """Some interleaving of buggy-merge has a step fail with 23505; none of fixed does."""

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        m, f = (records[v]["by_isolation"].get(RC) for v in ("buggy-merge", "fixed"))
        if m is None or f is None:
            return None
        km, kf = (c["step_sqlstates"].get("23505", 0) for c in (m, f))
        return m["ran"] > 0 and f["ran"] > 0 and km > 0 and kf == 0, (
            f"a step failed with 23505 in {km}/{m['ran']} interleavings of MERGE, "
            f"{kf}/{f['ran']} of ON CONFLICT"
        )

    return Claim(cid, text, ("buggy-merge", "fixed"), check, published, explore=True, levels=(RC,))


def needs_17(claim: Claim) -> Claim:
    """`claim`, not judged when buggy-merge ran on a server older than PostgreSQL 17."""
    inner: Callable[[Mapping[str, Record]], tuple[bool, str] | None] = claim.check

    def check(records: Mapping[str, Record]) -> tuple[bool, str] | None:
        if NEEDS_17 in json.dumps(records.get("buggy-merge", {}), default=str):
            raise NotJudged("needs PostgreSQL 17 (MERGE ... RETURNING); buggy-merge did not run")
        return inner(records)

    return replace(claim, check=check)
