"""A machine without a part some scenarios need (PgBouncer) and servers given by URL that do
not answer: one line before anything starts; verify judges every other claim."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from typer.testing import CliRunner

from lab.cli import app
from lab.core.profiles import QUICK
from lab.verify.judge import ScenarioVerdicts, missing_part, summarize
from scenarios import SCENARIOS

runner = CliRunner()
BOUNCER = next(s for s in SCENARIOS if "pgbouncer" in s.uses)
WHY = "pgbouncer not installed: apt-get install pgbouncer"


@pytest.fixture
def no_pgbouncer(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process finds no pgbouncer, as on a machine without Debian's package, and runs
    the lab's own servers (a DSN of the user's would need LOCKLAB_PGBOUNCER_DSN instead)."""
    which = shutil.which

    def without(name: str, *args: Any, **kwargs: Any) -> str | None:
        return None if name == "pgbouncer" else which(name, *args, **kwargs)

    monkeypatch.setattr(shutil, "which", without)  # the module pgbouncer.py looks it up in
    for var in ("LOCKLAB_PGBOUNCER", "LOCKLAB_PGBOUNCER_DSN", "LOCKLAB_PG_DSN", "LOCKLAB_SERVERS"):
        monkeypatch.delenv(var, raising=False)


def test_missing_claims_are_not_judged_and_do_not_fail_the_summary() -> None:
    """The part's claims are counted apart, with the reason; the rest decide `ok`."""
    missing = missing_part(BOUNCER, QUICK, WHY)
    assert missing.verdicts and all(v["status"] == "not judged" for v in missing.verdicts)
    assert {v["measured"] for v in missing.verdicts} == {WHY}
    held = ScenarioVerdicts("x", "x", "quick", {}, {}, 1, [{"id": "DL-1", "status": "held"}])
    summary = summarize([held, missing], "quick")
    assert summary.ok and summary.held == 1 and summary.not_judged == 0
    assert summary.missing == len(missing.verdicts) and summary.scenarios == 1
    assert f"NOT JUDGED ({WHY})" in summary.line()
    broken = ScenarioVerdicts("x", "x", "quick", {}, {}, 1, [{"id": "DL-1", "status": "not held"}])
    assert not summarize([broken, missing], "quick").ok  # the others still decide


def test_verify_without_pgbouncer_judges_every_other_claim(no_pgbouncer: None) -> None:
    """verify asked for PgBouncer's scenario and another: exit 0, PgBouncer's claims NOT
    JUDGED with the reason and how to install it, the other's claims judged."""
    other = "locked-limit"
    args = ["verify", BOUNCER.id, other, "--json", "--no-record", "--lanes", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for s in doc["scenarios"]:
        by_scenario.setdefault(s["scenario"], []).extend(s["verdicts"])
    assert {v["measured"] for v in by_scenario[BOUNCER.id]} == {WHY}
    assert all(v["status"] == "not judged" for v in by_scenario[BOUNCER.id])
    assert by_scenario[other] and all(v["judged"] for v in by_scenario[other])
    assert doc["summary"]["missing"] == len(by_scenario[BOUNCER.id])
    assert f"{BOUNCER.id} not judged: {WHY}" in result.stderr


@pytest.mark.parametrize("command", ["run", "verify"])
def test_pgbouncers_scenario_alone_stops_with_the_reason(no_pgbouncer: None, command: str) -> None:
    """Asked for alone there is nothing to judge: one line, exit 2, no server started."""
    result = runner.invoke(app, [command, BOUNCER.id, "--no-record"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1].startswith(f"locklab: {WHY}")
    assert "server postgresql" not in result.stderr


@pytest.mark.parametrize(
    ("flag", "url", "scenario", "what"),
    [
        ("--redis-url", "redis://127.0.0.1:1/0", "lease-gc-pause", "Redis"),
        ("--pg-dsn", "postgresql://u:secret@127.0.0.1:1/x", "lease-gc-pause", "PostgreSQL"),
    ],
)
def test_a_server_given_by_url_is_checked_before_anything_starts(
    flag: str, url: str, scenario: str, what: str
) -> None:
    """A closed port: one line naming the server (no password), exit 2, nothing started."""
    result = runner.invoke(app, ["run", scenario, flag, url, "--no-record"])
    assert result.exit_code == 2, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"locklab: cannot reach {what} at "), line
    assert "secret" not in result.output and "server " not in result.stderr
