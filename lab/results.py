"""Run records: one JSON file per scenario × variant, written atomically under results/."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from lab.errors import LabError

SCHEMA_VERSION = 1


def results_root() -> Path:
    return Path(os.environ.get("LOCKLAB_RESULTS", "results"))


def new_run_id() -> str:
    """Sortable by time, unique enough for concurrent users: 20261129-235959-a1b2."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def record_path(run_id: str, scenario: str, variant: str, root: Path | None = None) -> Path:
    return (root or results_root()) / run_id / f"{scenario}.{variant}.json"


def write_json(path: Path, data: Any) -> Path:
    """Write via a temporary file and rename, so no reader ever sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, default=str)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_record(record: dict[str, Any], root: Path | None = None) -> Path:
    """One record, atomically: a reader sees the whole record or none (Ctrl-C included)."""
    return write_json(
        record_path(record["run_id"], record["scenario"], record["variant"], root), record
    )


def load_run(ref: str, root: Path | None = None) -> list[dict[str, Any]]:
    """Every record of a run, given its id or its folder."""
    folder = Path(ref) if Path(ref).is_dir() else (root or results_root()) / ref
    if not folder.is_dir():
        raise LabError(f"no recorded run {ref!r} (see `locklab results`)")
    records = []
    for path in sorted(folder.glob("*.json")):
        try:
            records.append(upgrade(json.loads(path.read_text())))
        except (OSError, ValueError) as exc:
            raise LabError(f"{path}: not a readable record ({exc})") from None
    if not records:
        raise LabError(f"run {ref!r} has no records")
    return records


def list_runs(root: Path | None = None) -> list[Path]:
    base = root or results_root()
    if not base.is_dir():
        return []
    return sorted((p for p in base.iterdir() if p.is_dir() and any(p.glob("*.json"))), reverse=True)


def upgrade(record: dict[str, Any]) -> dict[str, Any]:
    """Old records stay readable: fill what later schema versions added."""
    record.setdefault("schema", 1)
    return record


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
