"""A scenario's -p knobs declared as Param: default, help and bounds, checked before a
server starts (lab.core.scenario.check_params)."""

from __future__ import annotations

import re

import pytest

import scenarios
from lab.core.scenario import Param, Scenario, check_params
from lab.errors import LabError


def toy(**params: object) -> Scenario:
    return Scenario(id="toy", doc="Toy.", kind="actors", variants={}, outcomes=(), params=params)


def test_params_become_defaults_help_and_specs() -> None:
    """Param declarations give a scenario its defaults, help texts and bounds."""
    sc = toy(stock=Param(1, "units", min=0), seed=7)
    assert sc.params == {"stock": 1, "seed": 7}
    assert sc.param_help == {"stock": "units"}
    assert set(sc.param_specs) == {"stock"}


@pytest.mark.parametrize(
    ("spec", "value", "error"),
    [
        (Param(1, min=1), 0, "-p n_jobs=0: at least 1"),
        (Param(1.0, above=0), 0, "-p n_jobs=0: more than 0"),
        (Param("a", choices=("a", "b")), "c", "-p n_jobs='c': one of a, b"),
        (Param(1, min=0), "x", "-p n_jobs='x': a number"),
        (Param(1, min=0), True, "-p n_jobs=True: a number"),
    ],
)
def test_a_value_out_of_bounds_is_one_line(spec: Param, value: object, error: str) -> None:
    """A -p value out of its bounds is one line naming the parameter and the bound."""
    with pytest.raises(LabError, match=f"^{re.escape(error)}$"):
        spec.check("n_jobs", value)


def test_the_unit_comes_from_the_name() -> None:
    """The unit in an out-of-bounds message comes from the parameter's name (_ms: ms)."""
    with pytest.raises(LabError, match=re.escape("-p lock_timeout_ms=0: at least 1 ms")):
        Param(100, min=1).check("lock_timeout_ms", 0)


def test_values_in_bounds_pass_and_validate_runs_after() -> None:
    """Values within bounds pass, and the scenario's own validate runs after the bounds."""
    seen = []
    sc = Scenario(
        id="toy",
        doc="Toy.",
        kind="actors",
        variants={},
        outcomes=(),
        params={"a": Param(1, min=0), "b": Param(2, min=0)},
        validate=lambda n, p: seen.append((n, dict(p))),
    )
    check_params(sc, 3, {"a": 0, "b": 5})
    assert seen == [(3, {"a": 0, "b": 5})]
    with pytest.raises(LabError):
        check_params(sc, 3, {"a": -1, "b": 5})
    assert len(seen) == 1  # the bound failed first: validate never ran


@pytest.mark.parametrize("sc", scenarios.SCENARIOS, ids=[s.id for s in scenarios.SCENARIOS])
def test_every_default_is_within_its_own_bounds(sc: Scenario) -> None:
    """Every scenario parameter's default lies within its own bounds."""
    for name, spec in sc.param_specs.items():
        spec.check(name, spec.default)


def test_show_says_what_a_param_takes() -> None:
    """bounds() says in words what values a parameter takes."""
    assert Param(1, min=1).bounds() == ">= 1"
    assert Param(1.0, above=0).bounds() == "> 0"
    assert Param("a", choices=("a", "b")).bounds() == "one of a, b"
    assert Param(1).bounds() == ""


def test_a_copied_scenario_keeps_its_bounds() -> None:
    """dataclasses.replace (a profile's or a test's copy) keeps what each knob takes."""
    import dataclasses

    sc = dataclasses.replace(toy(stock=Param(1, "units", min=0)), quick={"stock": 2})
    assert sc.params == {"stock": 1} and sc.param_specs["stock"].min == 0
    with pytest.raises(LabError, match="at least 0"):
        check_params(sc, 1, {"stock": -1})
