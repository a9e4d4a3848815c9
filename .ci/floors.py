"""The lowest versions pyproject.toml's ranges allow, as pip constraints: `name==floor` for
every dependency and every extra but docs (the `>=` bound of each range), and the lock's
version for everything they pull in, so the floors step is as repeatable as the lock.

    python .ci/floors.py > floors.txt        # then: pip install -c floors.txt -e '.[...]'
    python .ci/floors.py --imports           # import every module of lab/ and scenarios/
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = ("servers", "dev", "versions")  # docs: mkdocs builds a site, nothing imports it


def floors() -> dict[str, str]:
    """name -> `==floor ; marker` of every direct requirement with a lower bound."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    given = list(project["dependencies"])
    for extra in EXTRAS:
        given += project["optional-dependencies"][extra]
    out: dict[str, str] = {}
    for req in map(Requirement, given):
        lows = [s.version for s in req.specifier if s.operator in (">=", "==", "~=")]
        if lows:
            marker = f" ; {req.marker}" if req.marker else ""
            out[canonicalize_name(req.name)] = f"{req.name}=={lows[0]}{marker}"
    return out


def locked() -> dict[str, str]:
    """name -> `name==version ; marker` of every pin of requirements.txt."""
    text = (ROOT / "requirements.txt").read_text()
    pins = re.findall(r"^([A-Za-z0-9][\w.-]*==[^\s;\\]+(?: ;[^\\\n]*)?)", text, re.MULTILINE)
    return {canonicalize_name(p.split("==")[0]): p.strip() for p in pins}


def import_everything() -> int:
    """Import every module of the lab and the catalogue; the count imported."""
    sys.path.insert(0, str(ROOT))
    count = 0
    for package in ("lab", "scenarios"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if info.name.endswith(".__main__"):
                continue  # runs the command line
            importlib.import_module(info.name)
            count += 1
    return count


if __name__ == "__main__":
    if sys.argv[1:] == ["--imports"]:
        print(f"imported {import_everything()} modules of lab/ and scenarios/")
    else:
        lines = {**locked(), **floors()}  # the floors win over the lock's pins
        print("\n".join(lines[name] for name in sorted(lines)))
