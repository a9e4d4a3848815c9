"""An isolation spec's output against its expected file and the file's alternates, as
pg_isolation_regress compares them: identical to any one of them is a pass."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path


def compare_expected(text: str, expected: Sequence[Path]) -> tuple[Path | None, str]:
    """(the expected file `text` is identical to, or None; else a unified diff against the
    closest one, as `diff -U3` would print it)."""
    best: tuple[int, Path, list[str]] | None = None
    lines = text.splitlines(keepends=True)
    for path in expected:
        want = path.read_text(errors="replace")
        if want == text:
            return path, ""
        diff = list(
            difflib.unified_diff(want.splitlines(keepends=True), lines, str(path), "locklab")
        )
        if best is None or len(diff) < best[0]:
            best = (len(diff), path, diff)
    return None, "".join(best[2]) if best else ""
