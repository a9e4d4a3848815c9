"""`locklab new NAME`: the skeleton it writes runs as is under run, trace, explore, verify."""

from __future__ import annotations

import json
from pathlib import Path

from lab.servers import Servers
from tests.test_scenario_files import locklab


def test_new_writes_a_skeleton_every_command_runs(tmp_path: Path, servers: Servers) -> None:
    """In an empty folder: new, then run/trace/explore/verify on ./my_checkout.py."""
    made = locklab("new", "my-checkout", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "my_checkout.py").is_file()
    assert "./my_checkout.py" in made.stdout

    run = locklab("run", "./my_checkout.py", cwd=tmp_path, servers=servers)
    assert run.returncode == 0, run.stderr
    assert "buggy" in run.stdout and "fixed" in run.stdout
    # output on a file of one's own speaks of that file, not of the catalogue's documents
    assert "locklab explore ./my_checkout.py (or verify)" in run.stdout + run.stderr

    trace = locklab("trace", "./my_checkout.py", cwd=tmp_path, servers=servers)
    assert trace.returncode == 0, trace.stderr
    buggy, fixed = trace.stdout.split("\n\n")
    assert "stock never below zero: stock 1 -> -1             BROKEN" in buggy
    assert "s2 read    SELECT qty FROM stock WHERE sku = 'A-1' FOR UPDATE  <waiting ...>" in fixed
    assert "s2" in fixed and "ends out_of_stock" in fixed and "BROKEN" not in fixed

    explore = locklab("explore", "./my_checkout.py", "--json", cwd=tmp_path, servers=servers)
    assert explore.returncode == 0, explore.stderr
    cells = {
        v: e["by_isolation"]["read_committed"]
        for v, e in json.loads(explore.stdout)["variants"].items()
    }
    assert cells["buggy"]["broke"] > 0
    assert cells["fixed"]["broke"] == 0 and cells["fixed"]["ran"] > 0

    verify = locklab("verify", "./my_checkout.py", "--json", cwd=tmp_path, servers=servers)
    assert verify.returncode == 0, verify.stderr
    doc = json.loads(verify.stdout)
    verdicts = [
        (c["id"], c["variants"], c["status"]) for r in doc["scenarios"] for c in r["verdicts"]
    ]
    assert verdicts == [("MC-1", ["buggy"], "held"), ("MC-1", ["fixed"], "held")], verdicts
    assert doc["coverage"] == "claims judged: MC-1"  # not the documents' DL 0/26, LC 0/35
    page = locklab("report", doc["run_id"], cwd=tmp_path, servers=servers)
    assert page.returncode == 0, page.stderr
    html = next(tmp_path.rglob("report.html")).read_text()
    assert "Node 24" not in html  # the documents' setup is said only beside their numbers


def test_new_refuses_to_overwrite(tmp_path: Path) -> None:
    """A second `new` of the same name: one line, exit 2, the file unchanged."""
    assert locklab("new", "my-checkout", cwd=tmp_path).returncode == 0
    path = tmp_path / "my_checkout.py"
    path.write_text("# mine\n")
    again = locklab("new", "my_checkout", cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.strip() == (
        "locklab: ./my_checkout.py exists already; not overwritten (pick another name or --dir)"
    )
    assert path.read_text() == "# mine\n"


def test_new_rejects_a_bad_name_and_takes_dir(tmp_path: Path) -> None:
    """A name that is no module name: one line, exit 2, nothing written; --dir is used."""
    for bad in ("Bad Name", "1st", "../escape", "a--b"):
        proc = locklab("new", bad, cwd=tmp_path)
        assert proc.returncode == 2, bad
        assert len(proc.stderr.strip().splitlines()) == 1 and "a name is" in proc.stderr
    assert list(tmp_path.iterdir()) == []
    proc = locklab("new", "stock", "--dir", "sub/dir", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "sub" / "dir" / "stock.py").is_file()
