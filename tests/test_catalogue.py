"""Every scenario in the registry is well-formed (no server needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.core.claims import PROFILES
from lab.core.profiles import Profile, profile_settings
from lab.core.scenario import Scenario, check_params
from scenarios import SCENARIOS

SECTIONS = ("Symptom", "Root cause", "Fix", "Published")
IDS = [s.id for s in SCENARIOS]


def test_ids_are_unique_and_name_their_module() -> None:
    """A scenario's id is its module's name with dashes: checkout_deadlock.py (or the folder
    checkout_deadlock/) -> checkout-deadlock."""
    assert len(set(IDS)) == len(IDS)
    root = Path(__file__).parent.parent / "scenarios"
    modules = {p.stem for p in root.glob("[!_]*.py")}
    modules |= {p.parent.name for p in root.glob("[!_]*/__init__.py")}
    assert {i.replace("-", "_") for i in IDS} == modules


@pytest.mark.parametrize("sc", SCENARIOS, ids=IDS)
def test_docstring_is_the_spec(sc: Scenario) -> None:
    """The docstring has a title line and the Symptom / Root cause / Fix / Published sections."""
    assert sc.title.endswith(".")
    for name in SECTIONS:
        assert sc.section(name), f"{sc.id}: no {name}: section"


@pytest.mark.parametrize("sc", SCENARIOS, ids=IDS)
def test_variants_pair_a_bug_with_a_fix(sc: Scenario) -> None:
    """Every scenario has a buggy variant and at least one fix."""
    assert "buggy" in sc.variants
    assert any(v.startswith("fixed") for v in sc.variants)


@pytest.mark.parametrize("sc", SCENARIOS, ids=IDS)
def test_claims_name_what_exists(sc: Scenario) -> None:
    """Claims read variants and cases the scenario has, carry a document id, and serialise."""
    assert sc.claims
    for c in sc.claims:
        assert c.id.split("-")[0] in {"DL", "LC", "DP"}, c.id
        assert set(c.cases) <= {"", *sc.cases}, (c.id, c.cases)
        assert set(c.profiles) <= set(PROFILES)
        for v in c.variants:
            variant, _, case = v.partition("@")
            assert variant in sc.variants, (c.id, v)
            assert not c.across or case in c.cases, (c.id, v)
        json.dumps({"id": c.id, "text": c.text, "published": c.published})


@pytest.mark.parametrize("sc", SCENARIOS, ids=IDS)
def test_profiles_and_cases_override_real_knobs(sc: Scenario) -> None:
    """quick and every case only override knobs or parameters the scenario has, with values
    the scenario's own validation accepts."""
    for profile in PROFILES:
        for case in ("", *sc.cases):
            knobs, params = profile_settings(sc, Profile.of(profile), case=case)
            assert knobs.n >= 1 and set(params) == set(sc.params)
            check_params(sc, knobs.n, params)


def test_declare_takes_what_the_code_module_says() -> None:
    """lab.core.scenario.declare: the id from the module's file, its doc, setup, schema,
    invariant and PINNED (whose load actors are the variants); what is given wins."""
    from lab.core.scenario import declare
    from scenarios.lost_update import lost_update as code

    sc = declare(code, outcomes=("ok",))
    assert (sc.id, sc.doc, sc.kind) == ("lost-update", code.__doc__, "actors")
    assert (sc.setup, sc.schema, sc.invariant, sc.pinned) == (
        code.setup,
        code.schema,
        code.invariant,
        code.PINNED,
    )
    assert set(sc.variants) == set(code.PINNED.code)
    given = declare(code, id="my-own", outcomes=("ok",), invariant=None, variants={}, kind="script")
    assert (given.id, given.invariant, dict(given.variants)) == ("my-own", None, {})
