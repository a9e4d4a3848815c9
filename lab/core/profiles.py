"""Profiles: the settings a scenario runs with in `verify`, and which claims a run can judge.

``published`` is a scenario's defaults (the documents' sizes and settings); ``quick``
applies its ``quick=`` overrides where a claim is about shape. A case (``cases=``) switches
something on for the claims that are about it (a failure mode, an isolation level).

A claim names the profiles it is judged in. `locklab run` and `compare` judge only the
claims their settings are made for: a run at the published settings judges the published
claims, a run with other sizes only the claims made for every profile; the rest are listed
as not judged, with the reason, instead of being shown "not held" at a size they are not
about.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lab.core.claims import PROFILES, Claim
from lab.core.knobs import Knobs
from lab.core.loader import command_name
from lab.core.scenario import Scenario
from lab.errors import LabError

KNOB_FIELDS = (
    "n",
    "arrival",
    "connect",
    "deadlock_timeout_ms",
    "actor_timeout_s",
    "run_timeout_s",
    "rtt",
    "procs",
    "redis_client",
)
# Knobs that change what a run measures; the seed, the hard timeouts and how the lab
# produces the load (--procs, --redis-client) do not make a run's settings another
# profile's (a claim about a rate says when the lab could not produce it).
MEASURED_KNOBS = ("n", "arrival", "connect", "deadlock_timeout_ms", "rtt", "redis_client")


@dataclass(frozen=True)
class Profile:
    """A verify profile, resolved once from the user's name (`Profile.of`) and passed down;
    records, JSON and the lane protocol carry its `name`."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in PROFILES:
            raise LabError(f"--profile {self.name!r}: choose from {', '.join(PROFILES)}")

    @classmethod
    def of(cls, name: str) -> Profile:
        """The profile named `name`; LabError (one line) for an unknown name."""
        return cls(name)

    def __str__(self) -> str:
        return self.name

    def judges(self, claim: Claim) -> bool:
        """Whether `claim` is judged in this profile."""
        return self.name in claim.profiles


QUICK = Profile("quick")
PUBLISHED = Profile("published")

# profile_settings' answers by scenario (kept with the key so its id is not reused), then by
# (profile name, seed, case): a verify asks for the same settings many times.
_SETTINGS: dict[int, tuple[Scenario, dict[tuple[str, int, str], tuple[Knobs, dict[str, Any]]]]]
_SETTINGS = {}


def _override(
    scenario: Scenario,
    what: str,
    overrides: Mapping[str, Any],
    knobs: dict[str, Any],
    params: dict[str, Any],
) -> None:
    for key, value in overrides.items():
        if key in KNOB_FIELDS:
            knobs[key] = value
        elif key in params:
            params[key] = value
        else:
            raise LabError(
                f"{scenario.id}: {what} {key!r} is neither a knob "
                f"({', '.join(KNOB_FIELDS)}) nor a parameter ({', '.join(params) or 'none'})"
            )


def profile_settings(
    scenario: Scenario, profile: Profile, seed: int = 1, case: str = ""
) -> tuple[Knobs, dict[str, Any]]:
    """The knobs and parameters a profile (and optionally one of the scenario's cases)
    runs `scenario` with: computed once per (scenario, profile, seed, case); the
    parameters are a fresh dict each call."""
    held = _SETTINGS.get(id(scenario))
    if held is None or held[0] is not scenario:
        if len(_SETTINGS) >= 512:
            _SETTINGS.clear()
        held = _SETTINGS[id(scenario)] = (scenario, {})
    key = (profile.name, seed, case)
    if key not in held[1]:
        held[1][key] = _settings(scenario, profile, seed, case)
    knobs, params = held[1][key]
    return knobs, dict(params)


def _settings(
    scenario: Scenario, profile: Profile, seed: int, case: str
) -> tuple[Knobs, dict[str, Any]]:
    d = scenario.defaults
    knobs: dict[str, Any] = {
        "n": d.n,
        "arrival": d.arrival,
        "connect": d.connect,
        "deadlock_timeout_ms": d.deadlock_timeout_ms,
        "seed": seed,
        "actor_timeout_s": d.actor_timeout_s,
        "run_timeout_s": d.run_timeout_s,
        "procs": 0,
        "redis_client": d.redis_client,
    }
    params = dict(scenario.params)
    if profile == QUICK:
        _override(scenario, "quick override", scenario.quick, knobs, params)
    if case:
        if case not in scenario.cases:
            raise LabError(
                f"{scenario.id} has no case {case!r} ({', '.join(scenario.cases) or 'none'})"
            )
        _override(scenario, f"case {case!r}", scenario.cases[case], knobs, params)
    return Knobs(**knobs), params


def setup_of(scenario: Scenario, knobs: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """ "document" when a run had the scenario's published settings (its defaults, which
    are the documents'), else "scaled: " and what differs, e.g. "n 200 -> 40"."""
    base_knobs, base_params = profile_settings(scenario, PUBLISHED)
    diffs = [
        f"{k} {getattr(base_knobs, k)!s} -> {knobs[k]!s}"
        for k in MEASURED_KNOBS
        if k in knobs and str(knobs[k]) != str(getattr(base_knobs, k))
    ]
    diffs += [
        f"{k} {base_params.get(k)!s} -> {v!s}"
        for k, v in params.items()
        if str(v) != str(base_params.get(k))
    ]
    return "scaled: " + ", ".join(diffs) if diffs else "document"


def claims_for(
    scenario: Scenario, profile: Profile, trials: int | None = None, case: str = ""
) -> tuple[list[Claim], list[Claim]]:
    """(claims judged in `profile`, claims that belong to other profiles only).

    `trials`, when given, replaces every judged claim's own trial count (e.g. `--trials 1`
    for a fast look at the published profile; the verdict still states the count).
    """
    judged: list[Claim] = []
    skipped: list[Claim] = []
    for c in scenario.claims:
        if c.across or c.explore or case not in c.cases:
            continue  # judged under other settings, across them, or on interleavings
        if not profile.judges(c):
            skipped.append(c)
        else:
            judged.append(replace(c, trials=trials) if trials else c)
    return judged, skipped


def profiles_of(
    scenario: Scenario, knobs: Knobs, params: Mapping[str, Any], case: str = ""
) -> tuple[tuple[str, str], ...]:
    """The (profile, case) pairs whose settings a run has: the same measured knobs and the
    same parameters. `case` is the one the run started from; others match by their
    settings alone (`-p isolation=repeatable_read` is the repeatable-read case). Empty
    when the run changed something."""
    found = []
    for k in dict.fromkeys((case, "", *scenario.cases)):
        for profile in PROFILES:
            p_knobs, p_params = profile_settings(scenario, Profile(profile), knobs.seed, k)
            same = all(getattr(knobs, f) == getattr(p_knobs, f) for f in MEASURED_KNOBS)
            if same and dict(params) == p_params:
                found.append((profile, k))
    return tuple(found)


def claims_for_run(
    scenario: Scenario, knobs: Knobs, params: Mapping[str, Any], case: str = ""
) -> tuple[list[Claim], list[dict[str, Any]]]:
    """(claims a single run with these settings can judge, the others with why not).

    At a profile's settings (or a case's): the claims made for them. At settings of the
    user's own: the claims made for every profile, which judge what the run exercised
    (a check returns None for what it did not). Claims that compare cases need verify."""
    matched = profiles_of(scenario, knobs, params, case)
    judged: list[Claim] = []
    not_judged: list[dict[str, Any]] = []
    name = command_name(scenario)
    for c in scenario.claims:
        only = "/".join(c.profiles)
        if c.explore:
            why = f"judged on every interleaving: locklab explore {name} (or verify)"
        elif c.across:
            named = " vs ".join(x or "defaults" for x in c.cases)
            why = f"compares settings ({named}): locklab verify {name}"
        elif matched and not any(k in c.cases for _, k in matched):
            hint = " or ".join(f"with --case {x}" if x else "without --case" for x in c.cases)
            why = f"about other settings: run it {hint}"
        elif matched and not any(p in c.profiles and k in c.cases for p, k in matched):
            have = "/".join(dict.fromkeys(p for p, _ in matched))
            why = f"made for the {only} settings; this run has the {have} ones"
        elif not matched and set(c.profiles) != set(PROFILES):
            why = f"made for the {only} settings; this run changed them (locklab verify)"
        else:
            judged.append(c)
            continue
        variants = sorted({v.split("@", 1)[0] for v in c.variants})  # across: "<variant>@<case>"
        not_judged.append({"id": c.id, "text": c.text, "variants": variants, "why": why})
    return judged, not_judged
