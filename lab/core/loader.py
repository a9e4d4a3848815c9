"""A user's own scenario file (or a folder of them), named on the command line.

The file is loaded by its path and must define ``SCENARIO = Scenario(...)``, as every
catalogue module does. Loading it registers nothing: the catalogue (scenarios/) stays
what scenarios/__init__.py lists. The file's folder goes first on sys.path while it
loads (and after), so that it can import the code it tests from beside it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from lab.core.scenario import Scenario
from lab.errors import LabError


def is_folder(name: str) -> bool:
    """Whether `name` is a folder; False for names the system cannot look up at all (too
    long, a NUL byte): those are bad scenario names, which the caller reports in one line."""
    try:
        return Path(name).is_dir()
    except (OSError, ValueError):
        return False


def looks_like_path(name: str) -> bool:
    """Whether a scenario argument names a file or folder rather than a catalogue id."""
    return name.endswith(".py") or "/" in name or name in (".", "..") or is_folder(name)


def scenario_files(name: str) -> list[Path]:
    """The scenario files a path names: the file, or the folder's *.py (not _private.py)."""
    path = Path(name)
    try:
        path.stat()
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        raise LabError(f"{name[:60]}...: not a usable path ({exc.__class__.__name__})") from None
    if path.is_dir():
        files = sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
        if not files:
            raise LabError(f"{name}: no scenario files (*.py) in this folder")
        return files
    if not path.is_file():
        raise LabError(f"{name}: no such scenario file")
    if path.suffix != ".py":
        raise LabError(f"{name}: a scenario file is a Python file (*.py)")
    return [path]


_FROM_FILE: dict[str, str] = {}  # a file's scenario id -> the path it was loaded from


def command_name(scenario: Scenario) -> str:
    """What to type to name `scenario` on the command line: its id, or for a scenario of
    the user's own the file it came from (its id is no catalogue name)."""
    return _FROM_FILE.get(scenario.id, scenario.id)


def load_file(path: Path) -> Scenario:
    """The SCENARIO a file defines; one line (naming the path as given) when it has none
    or fails to import."""
    shown = str(path)
    path = path.resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    module_name = f"locklab_user_{path.stem}_{digest}"
    if (loaded := sys.modules.get(module_name)) is not None:
        found = getattr(loaded, "SCENARIO", None)
        if isinstance(found, Scenario):
            return found
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise LabError(f"{shown}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    if (folder := str(path.parent)) not in sys.path:  # its variants may import lazily too
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise LabError(f"{shown}: importing it failed: {type(exc).__name__}: {exc}") from None
    scenario = getattr(module, "SCENARIO", None)
    if not isinstance(scenario, Scenario):
        sys.modules.pop(module_name, None)
        what = "no SCENARIO" if scenario is None else f"SCENARIO of type {type(scenario).__name__}"
        raise LabError(
            f"{shown}: defines {what}; a scenario file must define SCENARIO = Scenario(...)"
        )
    _FROM_FILE[scenario.id] = shown if "/" in shown else f"./{shown}"
    return scenario


def load_path(name: str) -> list[Scenario]:
    """Every scenario a file or folder argument names, in file-name order."""
    loaded = [load_file(p) for p in scenario_files(name)]
    ids = [s.id for s in loaded]
    if dupes := sorted({i for i in ids if ids.count(i) > 1}):
        raise LabError(f"{name}: several files define scenario id {', '.join(dupes)}")
    return loaded
