"""Claim evaluation for `locklab verify`: profiles, trials, verdicts, on recorded runs.

Judging is pure, so these tests need no server: records are written to a temporary
results folder the way the runner writes them, read back, and judged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from rich.console import Console

from lab.core import profiles
from lab.core.claims import Claim, Record, all_ok, deadlocks, invariants_hold, majority, repeated
from lab.core.profiles import PUBLISHED, QUICK, Profile, claims_for, profile_settings, setup_of
from lab.core.records import Verdict
from lab.core.results import write_record
from lab.core.scenario import Defaults, Scenario
from lab.errors import LabError
from lab.output.verdicts import print_verdicts
from lab.servers import Servers
from lab.verify import (
    ScenarioVerdicts,
    Trial,
    coverage,
    evaluate,
    judge_across,
    load_verdicts,
    merge_cases,
    recorded_trials,
    save_verdicts,
    steps,
    summarize,
    variants_for_trial,
    verify_plan,
    verify_recorded,
)
from tests.conftest import assert_all_held

ROOT = Path(__file__).resolve().parent.parent
LAB = [sys.executable, "-m", "lab.cli"]


def make_record(
    variant: str,
    outcomes: Mapping[str, int],
    *,
    scenario: str = "toy-deadlock",
    run_id: str = "20260101-000000-aaaa",
    wall_ms: float = 450.0,
    seed: int = 1,
    n: int | None = None,
    deadlocks_seen: int | None = None,
    invariants_ok: bool = True,
    **extra: Any,
) -> Record:
    """A record shaped like the runner's (schema 1), with only what a test sets varying."""
    total = sum(outcomes.values())
    dl = outcomes.get("40P01", 0) if deadlocks_seen is None else deadlocks_seen
    rec: dict[str, Any] = {
        "schema": 1,
        "run_id": run_id,
        "scenario": scenario,
        "variant": variant,
        "title": "Toy deadlock: two carts, opposite order.",
        "started_at": "2026-01-01T00:00:00+00:00",
        "knobs": {
            "n": n or total,
            "arrival": "burst",
            "connect": "per-actor",
            "deadlock_timeout_ms": 100,
            "seed": seed,
            "actor_timeout_s": 30,
            "run_timeout_s": 60,
        },
        "params": {"step_pause_ms": 5.0},
        "servers": {
            "postgresql": {"product": "postgresql", "kind": "embedded", "version": "17.10"},
        },
        "lab": {"version": "0.1.0", "git_commit": "abc123", "python": "3.11.7"},
        "outcomes": dict(outcomes),
        "wall_ms": wall_ms,
        "latency_ms": {"min": 100.0, "p50": 130.0, "p95": 300.0, "p99": 440.0, "max": 450.0},
        "latency_ms_by_outcome": {},
        "counters": {},
        "samples": {},
        "invariants": [
            {"name": "stock moved once per commit", "held": invariants_ok, "detail": "sold 1"}
        ],
        "evidence": {
            "pg_stat_deadlocks": dl,
            "deadlocks": {"reports": dl, "cycle_lengths": {"2": dl} if dl else {}, "max_cycle": 2},
        },
        "trace": [],
        "published": "",
        "claims": [],
    }
    rec.update(extra)
    return cast(Record, rec)  # the keys a test adds (`extra`) are checked by the tests' reads


CLAIMS = (
    repeated(majority("DL-3", "buggy", "40P01", "most checkouts fail with 40P01"), 3, 2 / 3),
    deadlocks("DL-3", "buggy", "the server reports deadlocks", expect=True),
    all_ok("DL-3", "fixed", "every checkout succeeds", published='{"ok":200} in 10955 ms'),
    deadlocks("DL-3", "fixed", "zero deadlocks", expect=False),
    invariants_hold("DL-3", "fixed", "stock moved once per commit"),
    Claim("DL-4", "long cycles", ("buggy",), lambda r: (True, "x"), profiles=("published",)),
)


async def _never(*args: Any) -> str:
    raise AssertionError("the toy scenario is never run")


TOY = Scenario(
    id="toy-deadlock",
    doc="Toy deadlock: two carts, opposite order.\n",
    kind="actors",
    variants={"buggy": _never, "fixed": _never},
    outcomes=("ok", "40P01"),
    claims=CLAIMS,
    defaults=Defaults(n=200, deadlock_timeout_ms=1000),
    params={"step_pause_ms": 5.0},
    quick={"n": 40, "deadlock_timeout_ms": 100, "step_pause_ms": 2.0},
)


def trial(seed: int, buggy: Mapping[str, int], fixed: Mapping[str, int] | None = None) -> Trial:
    recs = {"buggy": make_record("buggy", buggy, seed=seed)}
    if fixed is not None:
        recs["fixed"] = make_record("fixed", fixed, seed=seed)
    return Trial(seed, recs)  # as verify reads a runner's records


def by_text(verdicts: list[Verdict]) -> dict[str, Verdict]:
    return {v["text"]: v for v in verdicts}


def test_quick_profile_applies_knob_and_param_overrides() -> None:
    """quick takes n, deadlock_timeout and scenario params from `quick=`; published the defaults."""
    knobs, params = profile_settings(TOY, QUICK, seed=7)
    assert (knobs.n, knobs.deadlock_timeout_ms, knobs.seed) == (40, 100, 7)
    assert params == {"step_pause_ms": 2.0}
    knobs, params = profile_settings(TOY, PUBLISHED)
    assert (knobs.n, knobs.deadlock_timeout_ms) == (200, 1000)
    assert params == {"step_pause_ms": 5.0}


def test_bad_profile_and_bad_quick_override_are_one_line_errors() -> None:
    """An unknown profile or a quick key that is neither knob nor param raises LabError."""
    with pytest.raises(LabError, match="--profile 'fast'"):
        Profile.of("fast")
    bad = Scenario(**{**TOY.__dict__, "quick": {"sleep": 1}})
    with pytest.raises(LabError, match="quick override 'sleep'"):
        profile_settings(bad, QUICK)


def test_profile_of_resolves_a_name_or_gives_one_line() -> None:
    """Profile.of gives the value records show by name; an unknown name, one line naming both."""
    assert Profile.of("quick") == QUICK and str(PUBLISHED) == PUBLISHED.name == "published"
    with pytest.raises(LabError) as caught:
        Profile.of("fast")
    assert str(caught.value) == "--profile 'fast': choose from quick, published"


def test_profile_settings_are_computed_once_per_scenario_profile_seed_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """profile_settings and setup_of compute a (scenario, profile, seed, case) once; a copied
    scenario is computed afresh, and each caller gets its own params dict."""
    computed: list[tuple[str, str, int]] = []
    settings = profiles._settings

    def counted(sc: Scenario, profile: Profile, seed: int, case: str) -> Any:
        computed.append((sc.id, profile.name, seed))
        return settings(sc, profile, seed, case)

    monkeypatch.setattr(profiles, "_settings", counted)
    toy = replace(TOY)
    knobs, params = profile_settings(toy, QUICK, seed=9)
    params["step_pause_ms"] = -1.0
    assert profile_settings(toy, Profile.of("quick"), seed=9) == (knobs, {"step_pause_ms": 2.0})
    for _ in range(3):
        setup_of(toy, knobs.to_json(), {"step_pause_ms": 2.0})
    assert computed == [(toy.id, "quick", 9), (toy.id, "published", 1)]
    profile_settings(replace(toy, params={"step_pause_ms": 3.0}), QUICK, seed=9)
    assert len(computed) == 3


def test_claims_for_splits_by_profile_and_overrides_trials() -> None:
    """A published-only claim is skipped in quick; --trials replaces every claim's count."""
    judged, skipped = claims_for(TOY, QUICK)
    assert [c.id for c in skipped] == ["DL-4"]
    assert judged[0].trials == 3
    judged, _ = claims_for(TOY, QUICK, trials=1)
    assert {c.trials for c in judged} == {1}
    judged, skipped = claims_for(TOY, PUBLISHED)
    assert not skipped and len(judged) == len(CLAIMS)


def test_later_trials_run_only_the_variants_repeated_claims_need() -> None:
    """Trial 1 runs every variant; trials 2..3 only buggy, which the repeated claim reads."""
    judged, _ = claims_for(TOY, QUICK)
    assert variants_for_trial(TOY, judged, 1) == ["buggy", "fixed"]
    assert variants_for_trial(TOY, judged, 2) == ["buggy"]
    assert steps(TOY, QUICK) == 2 + 1 + 1
    assert steps(TOY, QUICK, trials=1) == 2


def test_chance_claim_held_in_two_of_three_trials() -> None:
    """A repeated claim holds when it held in the required share of trials, and says so."""
    judged, _ = claims_for(TOY, QUICK)
    trials = [
        trial(1, {"ok": 1, "40P01": 39}, {"ok": 40}),
        trial(2, {"ok": 30, "40P01": 10}),  # an unlucky run: most checkouts committed
        trial(3, {"ok": 2, "40P01": 38}),
    ]
    v = by_text(evaluate(judged, trials))["most checkouts fail with 40P01"]
    assert v["status"] == "held" and v["held"] is True
    assert (v["trials_held"], v["trials_needed"], len(v["trials"])) == (2, 2, 3)
    assert [t["seed"] for t in v["trials"]] == [1, 2, 3]
    assert v["measured"].startswith("held in 2/3 trials")
    assert '{"ok":30,"40P01":10}' in v["measured"]  # the failing trial is the one shown


def test_chance_claim_not_held_when_too_few_trials_hold() -> None:
    """One of three trials holding is below the required two: not held."""
    judged, _ = claims_for(TOY, QUICK)
    trials = [
        trial(1, {"ok": 1, "40P01": 39}, {"ok": 40}),
        trial(2, {"ok": 30, "40P01": 10}),
        trial(3, {"ok": 35, "40P01": 5}),
    ]
    v = by_text(evaluate(judged, trials))["most checkouts fail with 40P01"]
    assert v["status"] == "not held" and v["held"] is False
    assert v["measured"].startswith("held in 1/3 trials")


def test_fixed_claims_not_held_on_a_deadlocking_fix() -> None:
    """A fixed variant that deadlocked fails all_ok and zero-deadlocks, measured shown."""
    judged, _ = claims_for(TOY, QUICK, trials=1)
    verdicts = by_text(evaluate(judged, [trial(1, {"40P01": 40}, {"ok": 39, "40P01": 1})]))
    ok = verdicts["every checkout succeeds"]
    assert ok["status"] == "not held"
    assert ok["measured"] == 'fixed: {"ok":39,"40P01":1} in 450 ms'
    assert ok["published"] == '{"ok":200} in 10955 ms'
    assert verdicts["zero deadlocks"]["status"] == "not held"
    assert verdicts["most checkouts fail with 40P01"]["status"] == "held"


def test_missing_variant_and_missing_trials_are_not_judged() -> None:
    """No fixed record, or fewer trials than asked: "not judged", never a silent pass."""
    judged, _ = claims_for(TOY, QUICK)
    verdicts = by_text(evaluate(judged, [trial(1, {"ok": 1, "40P01": 39})]))
    assert verdicts["every checkout succeeds"]["status"] == "not judged"
    assert verdicts["every checkout succeeds"]["measured"] == "no record of fixed"
    repeated_v = verdicts["most checkouts fail with 40P01"]
    assert repeated_v["status"] == "not judged"
    assert repeated_v["measured"].startswith("asks for 3 trials, 1 recorded")


def test_check_returning_none_is_not_judged_and_a_crashing_check_not_held() -> None:
    """In verify, at the claim's own settings, a check that finds nothing to judge is NOT
    JUDGED (never a silent pass); a check that raises is not held."""

    def boom(records: Mapping[str, Record]) -> tuple[bool, str]:
        raise KeyError("redis_get")

    claims = [
        Claim("DL-21", "no finally", ("buggy",), lambda r: None),
        Claim("DL-19", "GET counts", ("buggy",), boom),
    ]
    verdicts = by_text(evaluate(claims, [trial(1, {"ok": 4})]))
    assert verdicts["no finally"]["status"] == "not judged"
    assert "did not exercise it" in verdicts["no finally"]["measured"]
    assert verdicts["GET counts"]["status"] == "not held"
    assert "check failed: KeyError" in verdicts["GET counts"]["measured"]
    summary = summarize(
        [ScenarioVerdicts("toy", "", "quick", {}, {}, 1, list(verdicts.values()))], "quick"
    )
    assert summary.line().startswith("0 claims held, 1 not held")
    assert "1 not judged" in summary.line()
    assert not summary.ok


def test_a_claim_verify_ran_but_whose_effect_did_not_happen_fails_verify() -> None:
    """Issue 32's not-exercised defect: a check that returns None because the effect did
    not happen (no contention, pod-2 never in time) made a verify that judged nothing
    else pass. Now it is NOT JUDGED and verify's summary is not ok."""
    claims = [Claim("LC-12", "a refusal is timed", ("buggy",), lambda r: None)]
    verdicts = evaluate(claims, [trial(1, {"ok": 4})])
    summary = summarize([ScenarioVerdicts("toy", "", "quick", {}, {}, 1, verdicts)], "quick")
    assert [v["status"] for v in verdicts] == ["not judged"]
    assert not summary.ok


def test_summary_line_counts_held_not_held_and_other_profiles() -> None:
    """`N claims held, M not held`, plus the claims that belong to another profile."""
    judged, _ = claims_for(TOY, QUICK, trials=1)
    verdicts = evaluate(judged, [trial(1, {"ok": 1, "40P01": 39}, {"ok": 40})])
    res = ScenarioVerdicts("toy-deadlock", "", "quick", {}, {}, 1, verdicts, [{"id": "DL-4"}])
    summary = summarize([res], "quick")
    assert summary.ok
    assert summary.line() == (
        "5 claims held, 0 not held (1 belong to another profile) — profile quick, 1 scenario"
    )


def test_verify_recorded_run_with_trials_on_disk(tmp_path: Path) -> None:
    """Records written like verify writes them (trial-2, trial-3 folders) are judged again."""
    run = "20260101-000000-bbbb"
    for k, buggy in enumerate(
        [{"ok": 1, "40P01": 39}, {"ok": 3, "40P01": 37}, {"ok": 36, "40P01": 4}], start=1
    ):
        rid = run if k == 1 else f"{run}/trial-{k}"
        meta = {"profile": "quick", "trial": k, "trials": 3, "seed": k}
        write_record(make_record("buggy", buggy, run_id=rid, seed=k, verify=meta), tmp_path)
        if k == 1:
            write_record(make_record("fixed", {"ok": 40}, run_id=rid, verify=meta), tmp_path)
    trials = recorded_trials(tmp_path / run)[("toy-deadlock", "")]
    assert [t.seed for t in trials] == [1, 2, 3]
    assert set(trials[0].records) == {"buggy", "fixed"} and set(trials[2].records) == {"buggy"}

    (res,) = verify_recorded(str(tmp_path / run), {"toy-deadlock": TOY})
    assert res.profile == "quick" and res.trials == 3
    verdicts = by_text(res.verdicts)
    assert verdicts["most checkouts fail with 40P01"]["measured"].startswith("held in 2/3")
    assert all(v["status"] == "held" for v in res.verdicts)
    assert [s["id"] for s in res.skipped] == ["DL-4"]


def test_recorded_run_made_with_trials_override_is_judged_over_all_its_trials(
    tmp_path: Path,
) -> None:
    """A run made with `--trials 3` is judged again over its 3 trials, not each claim's own 1."""
    for k in (1, 2, 3):
        rid = "r3" if k == 1 else f"r3/trial-{k}"
        meta = {"profile": "quick", "trial": k, "trials": 3, "trials_override": 3, "seed": k}
        fixed = {"ok": 40} if k != 2 else {"ok": 39, "40P01": 1}
        write_record(make_record("buggy", {"40P01": 40}, run_id=rid, seed=k, verify=meta), tmp_path)
        write_record(make_record("fixed", fixed, run_id=rid, seed=k, verify=meta), tmp_path)
    (res,) = verify_recorded(str(tmp_path / "r3"), {"toy-deadlock": TOY})
    v = by_text(res.verdicts)["every checkout succeeds"]
    assert v["status"] == "not held" and v["measured"].startswith("held in 2/3 trials")
    (one,) = verify_recorded(str(tmp_path / "r3"), {"toy-deadlock": TOY}, trials=1)
    assert by_text(one.verdicts)["every checkout succeeds"]["status"] == "held"


def test_verify_recorded_unknown_scenario_and_unknown_run(tmp_path: Path) -> None:
    """A record of a scenario not in the catalogue is an error row; a bad run id a LabError."""
    write_record(make_record("buggy", {"40P01": 2}, scenario="gone", run_id="r1"), tmp_path)
    (res,) = verify_recorded(str(tmp_path / "r1"), {})
    assert res.error == "scenario 'gone' is not in the catalogue"
    with pytest.raises(LabError, match="no recorded run"):
        verify_recorded(str(tmp_path / "nope"), {})


def test_verdicts_round_trip_and_table_without_colour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Saved verdicts load back; the table says held / NOT HELD in words, without colour."""
    monkeypatch.setenv("LOCKLAB_RESULTS", str(tmp_path))
    judged, _ = claims_for(TOY, QUICK, trials=1)
    verdicts = evaluate(judged, [trial(1, {"ok": 1, "40P01": 39}, {"ok": 39, "40P01": 1})])
    res = ScenarioVerdicts(
        "toy-deadlock",
        "Toy",
        "quick",
        {"n": 40, "arrival": "burst"},
        {},
        1,
        verdicts,
        [{"id": "DL-4", "text": "long cycles", "profiles": ["published"]}],
    )
    save_verdicts("r2", [res], summarize([res], "quick"))
    loaded = load_verdicts(tmp_path / "r2")
    assert loaded is not None and loaded[0].verdicts == json.loads(json.dumps(verdicts))
    buf = Console(width=200, color_system=None, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    print_verdicts(buf, loaded)
    text = buf.export_text()
    assert "NOT HELD" in text and "held" in text and "n/a (published only)" in text
    assert "\x1b[" not in text


def test_coverage_names_rechecked_and_unreached_claims() -> None:
    """Coverage counts judged ids per document, those at the document's settings apart,
    and folds unreached ids into ranges."""
    judged, _ = claims_for(TOY, QUICK, trials=1)
    verdicts = evaluate(judged, [trial(1, {"ok": 1, "40P01": 39}, {"ok": 40})])
    res = ScenarioVerdicts("toy-deadlock", "", "quick", {}, {}, 1, verdicts)
    line = coverage([res], [TOY])
    assert line.startswith(
        "document claims judged: DL 1/26 (1 at its settings), LC 0/35 (0 at its settings)"
    )
    assert "DL-1..2, DL-5..26, DP-1..10, LC-1..35" in line


# --- the command, on real servers and on recorded runs ---------------------------------


def locklab(*args: str, results: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOCKLAB_RESULTS": str(results), "NO_COLOR": "1"}
    return subprocess.run(
        [*LAB, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout
    )


def test_verify_quick_checkout_then_recorded_tampered(servers: Servers, tmp_path: Path) -> None:
    """verify exits 0 with the summary line; judged again after a fix record is tampered, exit 1."""
    assert servers.pg is not None
    proc = locklab("verify", "checkout-deadlock", "--pg-dsn", servers.pg.dsn, results=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " not held" in proc.stdout and "0 not held" in proc.stdout
    assert "\x1b[" not in proc.stdout
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    saved = json.loads((run / "verify" / "verdicts.json").read_text())
    assert saved["wall_s"] > 0 and saved["coverage"] in proc.stdout  # what it printed, kept

    again = locklab("verify", "--recorded", run.name, "--json", results=tmp_path)
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert doc["summary"]["not_held"] == 0 and doc["summary"]["held"] > 0

    fixed = run / "checkout-deadlock.fixed.json"
    rec = json.loads(fixed.read_text())
    rec["outcomes"] = {"ok": rec["knobs"]["n"] - 1, "40P01": 1}
    fixed.write_text(json.dumps(rec))
    bad = locklab("verify", "--recorded", run.name, results=tmp_path)
    assert bad.returncode == 1
    assert "NOT HELD" in bad.stdout
    verdicts = json.loads(
        locklab("verify", "--recorded", run.name, "--json", results=tmp_path).stdout
    )
    failed = [
        v["text"] for r in verdicts["scenarios"] for v in r["verdicts"] if v["status"] == "not held"
    ]
    assert "fixed: every checkout succeeds" in failed


def test_verify_bad_input_is_one_line(tmp_path: Path) -> None:
    """Unknown scenario, unknown profile, unknown recorded run: one line on stderr, exit 2."""
    for args, pattern in [
        (["verify", "checkout-deadlok"], "unknown scenario 'checkout-deadlok'"),
        (["verify", "--profile", "fast"], "--profile 'fast'"),
        (["verify", "--recorded", "no-such-run"], "no recorded run 'no-such-run'"),
        (["verify", "--trials", "0"], "--trials 0"),
    ]:
        proc = locklab(*args, results=tmp_path, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and pattern in lines[0], proc.stderr
        assert proc.stdout == ""


def test_cases_run_only_the_variants_their_claims_need() -> None:
    """A case (e.g. another isolation level) runs the variants its claims read, not all."""
    claims = [replace(c, cases=("rr",)) for c in CLAIMS if c.variants == ("buggy",)][:1]
    toy = replace(TOY, claims=tuple(claims), cases={"rr": {}})
    judged, _ = claims_for(toy, QUICK, case="rr")
    assert variants_for_trial(toy, judged, 1, case="rr") == ["buggy"]
    assert claims_for(toy, QUICK)[0] == []  # nothing left for the profile's own settings
    assert verify_plan([toy], QUICK) == [(toy, ""), (toy, "rr")]


def test_merge_cases_keeps_every_verdict_under_its_scenario() -> None:
    """Views keyed by scenario (the HTML report) see a case's verdicts, tagged with the case."""
    v: Verdict = {"id": "DL-2", "text": "deadlocks", "held": True, "status": "held"}
    base = ScenarioVerdicts("s", "t", "quick", {}, {}, 1, [v])
    case = ScenarioVerdicts("s", "t", "quick", {}, {}, 1, [v], case="rr")
    (merged,) = merge_cases([base, case])
    assert [x["text"] for x in merged.verdicts] == ["deadlocks", "[rr] deadlocks"]
    assert base.verdicts == [v]  # the inputs are not modified


def test_recorded_case_folders_are_judged_as_their_case(tmp_path: Path) -> None:
    """A case's records (case-<name>/) are judged again with the claims of that case only."""
    claim = replace(CLAIMS[1], cases=("rr",))
    toy = replace(TOY, claims=(CLAIMS[2], claim), cases={"rr": {}})
    write_record(make_record("fixed", {"ok": 40}, run_id="r"), tmp_path)
    meta = {"profile": "quick", "trial": 1, "trials": 1, "seed": 1, "case": "rr"}
    write_record(
        make_record("buggy", {"ok": 1, "40P01": 1}, run_id="r/case-rr", verify=meta), tmp_path
    )
    assert set(recorded_trials(tmp_path / "r")) == {("toy-deadlock", ""), ("toy-deadlock", "rr")}
    base, case = verify_recorded(str(tmp_path / "r"), {"toy-deadlock": toy})
    assert (base.case, [v["text"] for v in base.verdicts]) == ("", ["every checkout succeeds"])
    assert (case.case, [v["text"] for v in case.verdicts]) == (
        "rr",
        ["the server reports deadlocks"],
    )


def test_claims_across_cases_are_judged_on_both_cases_records() -> None:
    """A claim comparing two cases sees records named variant@case, and only those."""

    def slower(records: Mapping[str, Record]) -> tuple[bool, str]:
        a, b = records["buggy@short"]["wall_ms"], records["buggy@long"]["wall_ms"]
        return b >= 2 * a, f"{a} -> {b}"

    claim = Claim(
        "DL-5",
        "scales",
        ("buggy@short", "buggy@long"),
        slower,
        cases=("short", "long"),
        across=True,
    )
    toy = replace(TOY, claims=(CLAIMS[2], claim), cases={"short": {}, "long": {}})
    assert claims_for(toy, QUICK, case="short")[0] == []  # never judged inside one case
    assert verify_plan([toy], QUICK) == [(toy, ""), (toy, "short"), (toy, "long")]
    runs = [
        ScenarioVerdicts("toy-deadlock", "t", "quick", {}, {}, 1, [], case=case,
                         records={"buggy": make_record("buggy", {"40P01": 2}, wall_ms=ms)})
        for case, ms in (("short", 500.0), ("long", 2000.0))
    ]  # fmt: skip
    across = judge_across(toy, QUICK, runs)
    assert across is not None and across.case == "long vs short"
    (v,) = across.verdicts
    assert (v["status"], v["measured"]) == ("held", "500.0 -> 2000.0")


def test_a_run_judges_only_the_claims_its_settings_are_made_for() -> None:
    """run/compare: at the published settings every claim; at quick's, not the published-only
    DL-4; at settings of one's own only the claims made for every profile. A seed or a hard
    timeout does not change the settings; a claim about a case waits for that case."""
    from lab.core.profiles import claims_for_run, profiles_of

    toy = replace(TOY, cases={"rr": {"step_pause_ms": 9.0}})
    toy = replace(toy, claims=(*CLAIMS, replace(CLAIMS[2], id="DL-9", cases=("rr",))))
    published, params = profile_settings(toy, PUBLISHED)
    quick, quick_params = profile_settings(toy, QUICK)
    assert profiles_of(toy, published, params) == (("published", ""),)
    seeded = replace(published, seed=9, run_timeout_s=5)
    assert profiles_of(toy, seeded, params) == (("published", ""),)
    assert profiles_of(toy, quick, quick_params) == (("quick", ""),)
    assert profiles_of(toy, replace(published, n=10), params) == ()
    rr_params = {**params, "step_pause_ms": 9.0}  # the rr case's settings, named or not
    assert profiles_of(toy, published, rr_params) == (("published", "rr"),)

    judged, not_judged = claims_for_run(toy, published, params)
    assert "DL-4" in {c.id for c in judged}
    assert [(n["id"], n["why"]) for n in not_judged] == [
        ("DL-9", "about other settings: run it with --case rr")
    ]
    for knobs, p in ((quick, quick_params), (replace(published, n=10), params)):
        judged, not_judged = claims_for_run(toy, knobs, p)
        assert "DL-4" not in {c.id for c in judged}
        assert "made for the published settings" in {n["id"]: n["why"] for n in not_judged}["DL-4"]
    judged, _ = claims_for_run(toy, published, rr_params)
    assert [c.id for c in judged] == ["DL-9"]
    judged, _ = claims_for_run(toy, replace(published, n=10), params)  # own settings:
    assert "DL-9" in {c.id for c in judged}  # its check says whether the run exercised it


def test_run_records_carry_the_claims_they_could_not_judge() -> None:
    """The runner attaches verdicts of the judged claims and, per variant, the claims left
    out with the reason: a chance claim on one trial is one of them, never held."""
    from lab.load.plan import RunPlan
    from lab.load.runner import _attach_claims

    knobs, params = profile_settings(TOY, PUBLISHED)
    plan = RunPlan(TOY, ["buggy", "fixed"], replace(knobs, n=10), params, "r", write=False)
    records = {
        "buggy": make_record("buggy", {"ok": 2, "40P01": 8}),
        "fixed": make_record("fixed", {"ok": 10}),
    }
    _attach_claims(plan, records)
    assert "most checkouts fail with 40P01" not in by_text(records["buggy"]["claims"])
    left = {n["text"]: n for n in records["buggy"]["claims_not_judged"]}
    chance = left["most checkouts fail with 40P01"]["why"]  # one trial: NOT JUDGED, not held
    assert chance.startswith("1 of 3 trials here (verify needs 2 of 3); this one held")
    assert sorted(n["id"] for n in left.values()) == ["DL-3", "DL-4"]
    assert records["fixed"]["claims_not_judged"] == []  # DL-4 is about buggy
    assert_all_held(records["fixed"]["claims"])


def test_a_run_of_some_variants_says_which_claims_need_the_others() -> None:
    """A claim comparing buggy with fixed, on a run of buggy alone: not judged, and why."""
    from lab.load.plan import RunPlan
    from lab.load.runner import _attach_claims

    both = Claim("DL-3", "fixed beats buggy", ("buggy", "fixed"), lambda r: (True, "x"))
    toy = replace(TOY, claims=(both,))
    knobs, params = profile_settings(toy, PUBLISHED)
    plan = RunPlan(toy, ["buggy"], knobs, params, "r", write=False)
    records = {"buggy": make_record("buggy", {"ok": 2, "40P01": 8})}
    _attach_claims(plan, records)
    assert records["buggy"]["claims"] == []
    assert [n["why"] for n in records["buggy"]["claims_not_judged"]] == [
        "needs the fixed variant(s) too"
    ]


def test_a_held_gap_is_not_counted_held_and_says_not_reproduced() -> None:
    """A gap claim that holds (the gap is there: a record made before the gaps became
    NOT REPRODUCED verdicts) is counted apart from the held total, named NOT REPRODUCED in
    the summary line and in its row's word."""
    from lab.output.verdicts import held_word

    rows: list[Verdict] = [
        {"id": "DL-7", "text": "NOT REPRODUCED 400000 ms", "held": True, "status": "held"},
        {"id": "DL-1", "text": "plain", "held": True, "status": "held"},
    ]
    summary = summarize([ScenarioVerdicts("toy", "", "quick", {}, {}, 1, rows)], "quick")
    assert summary.line().startswith(
        "1 claims held, 0 not held (1 published number(s) NOT REPRODUCED)"
    )
    assert summary.ok and summary.to_json()["gaps"] == 1
    assert "NOT REPRODUCED" in held_word(rows[0]) and held_word(rows[1]) == "[green]held[/green]"


def test_the_summary_counts_scenarios_not_their_cases_and_explores() -> None:
    """A scenario's own settings, a case and its explore are three results, one scenario."""
    rows: list[Verdict] = [{"id": "DL-1", "text": "plain", "held": True, "status": "held"}]
    results = [
        ScenarioVerdicts("toy", "", "quick", {}, {}, 1, rows, case=case)
        for case in ("", "slow", "explore")
    ]
    results.append(ScenarioVerdicts("other", "", "quick", {}, {}, 1, rows))
    assert summarize(results, "quick").line().endswith("profile quick, 2 scenarios")


def test_a_timing_claim_slowed_by_the_machine_is_not_judged_with_the_measured_cause() -> None:
    """A timing claim that does not hold while the run's event loop waited for a CPU for a
    quarter of its window is NOT JUDGED, naming the wait; below that, or for a claim not
    about time, it is NOT HELD."""

    def slow(records: Mapping[str, Record]) -> tuple[bool, str]:
        return False, "took too long"

    def rec(share: float) -> dict[str, Record]:
        machine = {"lab_cpu_wait_ms": 300.0 * share, "lab_cpu_wait_share": share}
        return {"buggy": {"evidence": {"machine": machine}}}

    timed = Claim("X-1", "fast", ("buggy",), slow, timing=True)
    busy = timed.judge(rec(0.4))
    assert busy is not None and busy["status"] == "not judged"
    assert "event loop waited for a CPU 120 ms, 40% of its window" in busy["measured"], busy
    idle = timed.judge(rec(0.1))
    assert idle is not None and idle["status"] == "not held"
    plain = replace(timed, timing=False).judge(rec(0.4))
    assert plain is not None and plain["status"] == "not held"
