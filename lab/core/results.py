"""Run records: one JSON file per scenario × variant, written atomically under results/."""

from __future__ import annotations

import functools
import json
import os
import secrets
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from lab.core.records import Record
from lab.errors import LabError

SCHEMA_VERSION = 1


def results_root() -> Path:
    return Path(os.environ.get("LOCKLAB_RESULTS", "results"))


def new_run_id() -> str:
    """Sortable by time, unique enough for concurrent users: 20261129-235959-a1b2."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def record_path(run_id: str, scenario: str, variant: str, root: Path | None = None) -> Path:
    return (root or results_root()) / run_id / f"{scenario}.{variant}.json"


def write_text(path: Path, text: str) -> Path:
    """Write via a temporary file and rename, so no reader ever sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # not *.json: a temp file left by a killed writer must not be read as a record
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: Path, data: Any) -> Path:
    return write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def write_record(record: Record, root: Path | None = None) -> Path:
    """One record, atomically: a reader sees the whole record or none (Ctrl-C included)."""
    return write_json(
        record_path(record["run_id"], record["scenario"], record["variant"], root), record
    )


def run_folder(ref: str, root: Path | None = None) -> Path:
    """A recorded run's folder, given its id or the folder itself."""
    folder = Path(ref) if Path(ref).is_dir() else (root or results_root()) / ref
    if not folder.is_dir():
        raise LabError(f"no recorded run {ref!r} (see `locklab results`)")
    return folder


def read_record(path: Path) -> Record:
    """One record, upgraded to the current schema; one clear line if it is not one."""
    try:
        return upgrade(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise LabError(f"{path}: not a readable record ({exc})") from None


def load_run(ref: str, root: Path | None = None) -> list[Record]:
    """Every record of a run, given its id or its folder."""
    folder = run_folder(ref, root)
    records = [read_record(path) for path in sorted(folder.glob("*.json"))]
    if not records:
        raise LabError(f"run {ref!r} has no records")
    return records


def list_runs(root: Path | None = None) -> list[Path]:
    base = root or results_root()
    if not base.is_dir():
        return []
    return sorted((p for p in base.iterdir() if p.is_dir() and any(p.glob("*.json"))), reverse=True)


def upgrade(record: Record) -> Record:
    """Old records stay readable: fill what later schema versions added."""
    record.setdefault("schema", 1)
    return record


@functools.cache
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
