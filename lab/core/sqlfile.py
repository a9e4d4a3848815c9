"""Named SQL statements kept in a .sql file beside a scenario's code.

A statement too long for one line of Python lives in `<module>.sql` next to the module,
under a `-- name: NAME` line, written over as many lines as reads well. `statements()`
gives each as one line (its lines joined by single spaces), so what a transcript shows is
the same SQL either way. The file ships with the package (pyproject's package-data).
"""

from __future__ import annotations

import re
from pathlib import Path

from lab.errors import LabError

NAME = re.compile(r"--\s*name:\s*(\w+)\s*$")


def statements(module_file: str) -> dict[str, str]:
    """NAME -> statement for the .sql file beside `module_file` (pass `__file__`)."""
    path = Path(module_file).with_suffix(".sql")
    try:
        text = path.read_text()
    except OSError as exc:
        raise LabError(f"{path.name}: cannot read it ({exc.strerror or exc})") from None
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if m := NAME.match(line.strip()):
            if m[1] in found:
                raise LabError(f"{path.name}:{n}: {m[1]} is named twice")
            current = found[m[1]] = []
        elif line.strip().startswith("--") or not line.strip():
            continue
        elif current is None:
            raise LabError(f"{path.name}:{n}: SQL before the first '-- name:' line")
        else:
            current.append(line.strip())
    return {name: " ".join(lines) for name, lines in found.items()}
