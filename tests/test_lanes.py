"""verify on lanes (lab/verify/lanes.py): what may run beside what, and the same verdicts as one
lane, from real lane processes on real servers; a lane that dies fails the run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lab.core.profiles import PUBLISHED, QUICK
from lab.errors import LabError
from lab.load.databases import admin_connect
from lab.servers import Servers
from lab.verify import ScenarioVerdicts, verify_explores, verify_plan, verify_scenario
from lab.verify.jobs import Job, order, past_seconds, pick, plan_jobs
from lab.verify.lanes import parse_lanes, run_lanes
from scenarios import get


def _job(i: int, **kw: object) -> Job:
    return Job(i, get("lost-update"), **kw)  # type: ignore[arg-type]


def test_a_run_that_needs_the_machine_waits_for_every_lane_and_then_runs_alone() -> None:
    """A job that needs the whole machine waits for an empty lane set and then runs alone."""
    alone, other = _job(0, alone=True), _job(1)
    assert pick([alone, other], [_job(2)], 400) is None  # nothing overtakes it either
    assert pick([alone, other], [], 400) is alone
    assert pick([other], [alone], 400) is None


def test_one_redis_run_at_a_time_and_no_more_connections_than_the_server_has() -> None:
    """Shared Redis takes one job at a time; lanes never ask for more connections than allowed."""
    r1, r2, pg = _job(0, redis=True), _job(1, redis=True), _job(2, connections=50)
    assert pick([r2, pg], [r1], 400) is pg
    assert pick([r2], [r1], 400) is None
    big = _job(3, connections=300)
    assert pick([big, r2], [_job(4, connections=200)], 400) is r2
    assert pick([big], [], 100) is big  # alone it may ask for more: the run itself refuses


def test_timed_runs_go_together_and_never_beside_cpu_bound_ones() -> None:
    """Timed jobs run beside each other but never beside a CPU-bound one."""
    t1, t2, other = _job(0, timed=True), _job(1, timed=True), _job(2)
    assert pick([t2, other], [t1], 400) is t2
    assert pick([other], [t1], 400) is None
    assert pick([t1, other], [_job(3)], 400) is None  # nothing overtakes it either
    assert pick([t1], [], 400) is t1


def test_lanes_with_a_redis_of_their_own_run_redis_jobs_side_by_side() -> None:
    """With a Redis per lane, Redis jobs run side by side."""
    r1, r2 = _job(0, redis=True), _job(1, redis=True)
    assert pick([r2], [r1], 400) is None
    assert pick([r2], [r1], 400, shared_redis=False) is r2


def test_the_machine_first_then_timed_then_redis_then_the_longest() -> None:
    """Jobs are ordered: whole-machine, timed, Redis, then the longest first."""
    jobs = [_job(0, runs=1), _job(1, runs=9), _job(2, redis=True), _job(3, alone=True)]
    jobs.append(_job(4, timed=True))
    assert [j.index for j in order(jobs)] == [3, 4, 2, 1, 0]
    assert [j.index for j in order(jobs, {jobs[0].key: 30.0})] == [3, 4, 2, 0, 1]


def test_the_last_verify_on_lanes_says_how_long_each_job_took(tmp_path: Path) -> None:
    """The newest verify record's schedule gives each job's duration for ordering."""
    old, new = tmp_path / "20261201-100000-aaaa", tmp_path / "20261201-110000-bbbb"
    for folder, secs in ((old, 5.0), (new, 7.5)):
        (folder / "verify").mkdir(parents=True)
        data = {"summary": {"profile": "quick"},
                "schedule": [{"job": "x|", "lane": 1, "start_s": 1.0, "end_s": 1.0 + secs}]}  # fmt: skip
        (folder / "verify" / "verdicts.json").write_text(json.dumps(data))
    assert past_seconds(QUICK, tmp_path) == {"x|": 7.5}
    assert past_seconds(PUBLISHED, tmp_path) == {}


@pytest.mark.parametrize("bad", ["0", "-2", "three"])
def test_bad_lanes_are_refused(bad: str) -> None:
    """An impossible --lanes value is one LabError; auto means one lane for published."""
    with pytest.raises(LabError, match="--lanes"):
        parse_lanes(bad, QUICK)
    assert parse_lanes("auto", PUBLISHED) == 1


def _statuses(results: list[ScenarioVerdicts]) -> list[tuple[str, str, str, str]]:
    return sorted((r.scenario, r.case, v["id"], v["status"]) for r in results for v in r.verdicts)


async def test_two_lanes_judge_what_one_lane_judges(servers: Servers) -> None:
    """The same claims, the same statuses, in verify's order (loads, then explores), and
    both lanes did work."""
    chosen = [get("lost-update"), get("write-skew")]
    here = [
        await verify_scenario(sc, QUICK, servers, run_id="lanes-1", write=False, case=case)
        for sc, case in verify_plan(chosen, QUICK)
    ]
    here += await verify_explores(chosen, QUICK, servers, run_id="lanes-1", write=False)
    schedule: list[dict[str, object]] = []
    jobs = plan_jobs(chosen, QUICK, None)
    lanes = await run_lanes(
        jobs, 2, servers, profile=QUICK, run_id="lanes-2", seed=1, trials=None, write=False,
        schedule=schedule,
    )  # fmt: skip
    assert _statuses(lanes) == _statuses(here)
    assert [(r.scenario, r.case) for r in lanes] == [(r.scenario, r.case) for r in here]
    assert {e["lane"] for e in schedule} == {1, 2} and len(schedule) == len(jobs)
    assert all(r.records for r in lanes if r.case != "explore")  # for claims across cases


async def test_each_lane_runs_on_a_redis_of_its_own_stopped_afterwards(servers: Servers) -> None:
    """Two Redis scenarios on two lanes: side by side, each record names another Redis
    (the lab's and a lane's own), and the lane's Redis no longer answers afterwards."""
    import socket

    assert servers.redis is not None and servers.redis.info.kind == "embedded"
    chosen = [get("lease-busy-loop"), get("service-lock-order")]
    schedule: list[dict[str, object]] = []
    jobs = [j for j in plan_jobs(chosen, QUICK, None) if j.part < 0 and not j.case]
    results = await run_lanes(
        jobs, 2, servers, profile=QUICK, run_id="lanes-redis", seed=1, trials=None,
        write=False, schedule=schedule,
    )  # fmt: skip
    assert all(v["status"] == "held" for r in results for v in r.verdicts)
    used = {rec["servers"]["redis"]["address"] for r in results for rec in r.records.values()}
    assert len(used) == 2 and servers.redis.info.address in used, used
    (a, b) = sorted(schedule, key=lambda e: float(e["start_s"]))  # type: ignore[arg-type]
    assert float(b["start_s"]) < float(a["end_s"])  # type: ignore[arg-type]
    (own,) = used - {servers.redis.info.address}
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", int(own.rsplit(":", 1)[1])), timeout=1).close()


async def test_a_lane_that_dies_fails_the_run_with_one_line_and_leaves_no_lane(
    servers: Servers,
) -> None:
    """SIGKILL a lane while it runs a job: LabError naming it; no lane process is left."""
    pids: list[int] = []

    def kill_one(text: str) -> None:  # the first progress line: lanes are at work
        if not pids:
            found = _lane_pids()
            pids.extend(found)
            os.kill(found[0], signal.SIGKILL)

    jobs = plan_jobs([get("money-transfer")], QUICK, None)
    with pytest.raises(LabError, match=r"verify lane \d \(pid \d+\)|verify lanes:"):
        await run_lanes(
            jobs, 2, servers, profile=QUICK, run_id="lanes-kill", seed=1, trials=None,
            write=False, on_step=kill_one,
        )  # fmt: skip
    assert pids
    assert not [p for p in pids if _state(p) not in ("?", "Z")]  # gone (or a zombie)
    admin = await admin_connect(servers)
    try:  # the killed lane could not drop its run's database: the lab did
        left = await admin.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE '%lanes_kill%'"
        )
    finally:
        await admin.close()
    assert not left, left


def _lane_pids(parent: int | None = None) -> list[int]:
    """The lane children of `parent` (this process), by their command line."""
    me, found = parent or os.getpid(), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == me and b"lane_child.py" in cmd:
            found.append(int(d.name))
    return sorted(found)


def _state(pid: int) -> str:
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


async def test_sigterm_stops_verify_on_lanes_in_one_line_and_leaves_nothing(
    servers: Servers, tmp_path: Path
) -> None:
    """SIGTERM once the lanes are at work: exit 130, the one "interrupted" line, no lane
    process and no database of the run left on the server."""
    import asyncpg

    from lab.aio import until

    assert servers.pg is not None and servers.redis is not None
    env = {**os.environ, "LOCKLAB_PG_DSN": servers.pg.dsn, "LOCKLAB_REDIS_URL": servers.redis.url,
           "LOCKLAB_RESULTS": str(tmp_path), "NO_COLOR": "1"}  # fmt: skip
    errfile = tmp_path / "stderr.txt"
    admin: asyncpg.Connection = await admin_connect(servers)
    before = {r[0] for r in await admin.fetch("SELECT datname FROM pg_database")}
    try:
        proc = _start(["verify", "money-transfer", "--lanes", "2"], env, errfile)
        try:

            async def at_work() -> list[int]:  # the lanes exist and a run's database too
                now = {r[0] for r in await admin.fetch("SELECT datname FROM pg_database")}
                return _lane_pids(proc.pid) if now - before else []

            lanes = await until(at_work, 60, "lanes at work on a database of their own")
            proc.send_signal(signal.SIGTERM)
            rc = await asyncio.to_thread(proc.wait, 60)
        finally:
            if proc.poll() is None:
                proc.kill()
        left = await admin.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE 'locklab_%money%'"
        )
    finally:
        await admin.close()
    stderr = errfile.read_text()
    assert rc == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("locklab: interrupted")
    assert not [p for p in lanes if _state(p) not in ("?", "Z")]
    assert not left, left


def _start(args: list[str], env: dict[str, str], errfile: Path) -> subprocess.Popen[bytes]:
    """`locklab *args`, its stderr to a file (a full pipe would block the lab)."""
    with open(errfile, "w") as errout:
        return subprocess.Popen(
            [sys.executable, "-m", "lab.cli", *args], stdout=subprocess.DEVNULL, stderr=errout,
            env=env,
        )  # fmt: skip


async def test_lanes_write_their_records_where_the_lab_writes_them(
    servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lane runs in a lab folder of its own; its records still go under the lab's results
    root (a relative one included), as a one-lane verify's do, and the explore record too."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LOCKLAB_RESULTS", "out")
    jobs = plan_jobs([get("lost-update")], QUICK, None)
    await run_lanes(
        jobs, 2, servers, profile=QUICK, run_id="lanes-rec", seed=1, trials=None, write=True
    )
    folder = tmp_path / "out" / "lanes-rec"
    records = {p.name for p in folder.glob("lost-update.*.json")}
    assert {"lost-update.buggy.json", "lost-update.fixed.json"} <= records, records
    assert (folder / "explore" / "lost-update.json").is_file()
