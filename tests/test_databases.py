"""How a run's database is made (lab.load.databases.create_statement)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from lab.load.databases import create_statement


def servers(version: str, settings: dict[str, str]) -> Any:
    return SimpleNamespace(
        pg=SimpleNamespace(info=SimpleNamespace(version=version, settings=settings))
    )


def test_file_copy_only_on_the_labs_own_server_without_fsync() -> None:
    """FILE_COPY checkpoints: only where the lab set fsync off, and only from 15 on."""
    assert create_statement(servers("17.10", {"fsync": "off"}), "d") == (
        'CREATE DATABASE "d" STRATEGY = FILE_COPY'
    )
    assert create_statement(servers("17.10", {}), "d") == 'CREATE DATABASE "d"'  # a user's
    assert create_statement(servers("14.12", {"fsync": "off"}), "d") == 'CREATE DATABASE "d"'
