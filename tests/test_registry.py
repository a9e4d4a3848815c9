"""The catalogue imports a scenario's module only when that scenario is asked for."""

from __future__ import annotations

import subprocess
import sys

import scenarios


def _modules_after(code: str) -> list[str]:
    """The scenarios.* modules a fresh interpreter has imported after running `code`."""
    probe = (
        f"import sys\n{code}\nprint(sorted(m for m in sys.modules if m.startswith('scenarios.')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    modules: list[str] = eval(out.stdout)  # a list literal printed by the probe
    return modules


def test_every_entry_names_its_scenario() -> None:
    """Each module's SCENARIO has the id the catalogue derives from the module's name."""
    assert [s.id for s in scenarios.SCENARIOS] == list(scenarios.IDS)
    assert len(set(scenarios.IDS)) == len(scenarios.IDS)


def test_import_loads_no_scenario() -> None:
    """Importing the catalogue (and the CLI) imports no scenario module."""
    assert _modules_after("import scenarios, lab.cli") == []


def test_get_loads_only_its_own_module() -> None:
    """get('lost-update') imports lost-update's package and nothing of the others."""
    loaded = _modules_after("import scenarios; scenarios.get('lost-update')")
    assert loaded and all(m.startswith("scenarios.lost_update") for m in loaded)


def test_unknown_attribute_is_an_attribute_error() -> None:
    """A name the catalogue does not define raises AttributeError, not a silent None."""
    try:
        scenarios.NOT_A_THING  # noqa: B018
    except AttributeError:
        return
    raise AssertionError("scenarios.NOT_A_THING did not raise")
