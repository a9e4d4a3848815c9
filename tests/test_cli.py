"""The CLI's promises: one clear line and a non-zero exit on bad input, clean Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import asyncpg
import pytest

from lab.procs import alive as pid_alive
from lab.procs.lifecycle import stop_pid
from lab.servers import Servers

LAB = [sys.executable, "-m", "lab.cli"]
ROOT = Path(__file__).resolve().parent.parent


def locklab(
    *args: str, results: Path, timeout: float = 120, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "LOCKLAB_RESULTS": str(results), "NO_COLOR": "1", **(env or {})}
    return subprocess.run(
        [*LAB, *args], capture_output=True, text=True, timeout=timeout, env=full_env, cwd=ROOT
    )


def assert_one_line_error(
    proc: subprocess.CompletedProcess[str], pattern: str, results: Path
) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("locklab: "), proc.stderr
    assert re.search(pattern, last), last
    assert proc.stdout == ""
    assert not list(results.rglob("*.json")), "a failed run left a record"


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (
            ["run", "checkout-deadlok"],
            r"unknown scenario 'checkout-deadlok'; did you mean 'checkout-deadlock'",
        ),
        (["run", "nonsense"], r"unknown scenario 'nonsense'"),
        (["run", "x" * 300], r"unknown scenario 'x{300}'"),
        (["run", "x" * 300 + ".py"], r"x{60}\.\.\.: not a usable path"),
        (["run", "checkout-deadlock", "-n", "0"], r"-n 0: a run needs at least one actor"),
        (["run", "checkout-deadlock", "-n", "-5"], r"-n -5"),
        (["run", "checkout-deadlock", "--variant", "fastest"], r"no variant 'fastest'"),
        (["run", "checkout-deadlock", "--arrival", "wave"], r"--arrival 'wave'"),
        (["run", "checkout-deadlock", "-p", "colour=red"], r"--param 'colour=red'"),
        (["run", "checkout-deadlock", "-p", "step_pause_ms=slow"], r"expected a float"),
        (["run", "checkout-deadlock", "--pg-dsn", "postgresql://h:port/db"], r"malformed"),
        (["run", "checkout-deadlock", "--pg-dsn", "mysql://h/db"], r"malformed"),
        (["run", "checkout-deadlock", "-v", ","], r"--variant ',': name at least one variant"),
        (["run", "checkout-deadlock", "--actor-timeout", "nan"], r"timeouts must be positive"),
        (["compare", "checkout-deadlock", "--run-timeout", "inf"], r"timeouts must be positive"),
        (["results", "--limit", "0"], r"--limit 0: show at least one run"),
    ],
)
def test_bad_input_before_any_server(args: list[str], pattern: str, tmp_path: Path) -> None:
    """Input errors found before any server starts: one line, exit 2, nothing written."""
    proc = locklab(*args, results=tmp_path)
    assert proc.returncode == 2
    assert_one_line_error(proc, pattern, tmp_path)


def test_unreachable_dsn(tmp_path: Path) -> None:
    """A DSN nobody listens on: one line naming the address, exit 2."""
    proc = locklab(
        "run",
        "checkout-deadlock",
        "-n",
        "2",
        "--pg-dsn",
        "postgresql://postgres@127.0.0.1:1/postgres",
        results=tmp_path,
    )
    assert proc.returncode == 2
    assert_one_line_error(
        proc, r"cannot reach PostgreSQL at postgresql://127.0.0.1:1/postgres", tmp_path
    )


@pytest.mark.parametrize(
    ("scenario", "error"),
    [
        (
            "checkout-deadlock",
            r"-n 5000 with --connect per-actor needs 5004 PostgreSQL connections",
        ),
        (
            "upsert-idempotency",  # actors since it has step points: a session per request
            r"-n 5000 with --connect per-actor needs 5004 PostgreSQL connections",
        ),
    ],
)
async def test_more_actors_than_the_server_accepts(
    servers: Servers, tmp_path: Path, scenario: str, error: str
) -> None:
    """-n above max_connections is refused before a database is created, for actors and for
    a script that opens a session per request."""
    assert servers.pg is not None
    proc = locklab("run", scenario, "-n", "5000", "--pg-dsn", servers.pg.dsn, results=tmp_path)
    assert proc.returncode == 2
    assert_one_line_error(proc, error, tmp_path)
    conn = await asyncpg.connect(servers.pg.dsn)
    try:
        left = await conn.fetch("SELECT datname FROM pg_database WHERE datname LIKE 'locklab_%'")
    finally:
        await conn.close()
    assert left == []


def test_json_prints_only_records(servers: Servers, tmp_path: Path) -> None:
    """--json: one parseable record per variant on stdout, with knobs, outcomes and claims."""
    assert servers.pg is not None
    proc = locklab(
        "run",
        "checkout-deadlock",
        "-n",
        "4",
        "--deadlock-timeout",
        "100",
        "--json",
        "--pg-dsn",
        servers.pg.dsn,
        results=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["variant"] for r in records] == ["buggy", "fixed", "fixed-lock-first"]
    for r in records:
        assert {
            "scenario",
            "variant",
            "knobs",
            "outcomes",
            "wall_ms",
            "servers",
            "evidence",
            "claims",
        } <= set(r)
        assert r["knobs"]["n"] == 4 and r["knobs"]["deadlock_timeout_ms"] == 100
        assert all(isinstance(c["held"], bool) for c in r["claims"])
        assert "@" not in json.dumps(r["servers"])  # no credentials in records
    assert len(list(tmp_path.rglob("*.json"))) == 3


def test_ctrl_c_stops_servers_and_writes_nothing(tmp_path: Path) -> None:
    """SIGINT mid-run: exit 130, the embedded servers it started are gone, no record written."""
    args = ["run", "checkout-deadlock", "-v", "buggy", "-n", "200", "--arrival", "stagger:5ms"]
    with interruptible(tmp_path, *args) as (_, errfile):
        port = None
        for _ in range(600):
            if m := re.search(
                r"postgresql\s+embedded\s+\S+\s+127\.0\.0\.1:(\d+)", errfile.read_text()
            ):
                port = int(m[1])
                break
            time.sleep(0.05)
        assert port, "the run did not report its server"
        data_dir, postmaster = _wait_for_lock_waiters(_socket_dsn(port))
    stderr = errfile.read_text()
    assert "Traceback" not in stderr and "never retrieved" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("locklab: interrupted")
    assert_gone([postmaster])
    assert not Path(data_dir).exists()
    assert not list(tmp_path.rglob("*.json")) and not list(tmp_path.rglob("*.tmp"))
    assert len(list(tmp_path.iterdir())) == 1  # only stderr.txt


@contextlib.contextmanager
def interruptible(tmp_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """Run `locklab *args` on its own embedded servers; SIGINT it when the block ends and
    require exit 130. Its stderr goes to a file: a full pipe would block the lab."""
    env = {
        **os.environ,
        "LOCKLAB_RESULTS": str(tmp_path),
        "LOCKLAB_SERVERS": "embedded",
        "NO_COLOR": "1",
    }
    errfile = tmp_path / "stderr.txt"
    with open(errfile, "w") as errout:
        proc = subprocess.Popen(
            [*LAB, *args], stdout=subprocess.DEVNULL, stderr=errout, text=True, env=env, cwd=ROOT
        )
    try:
        yield proc, errfile
    finally:
        # Also when the block failed: a Ctrl-C lets the lab stop its servers, a SIGKILL
        # would orphan them; SIGKILL only if it does not end.
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert proc.returncode == 130, errfile.read_text()


def assert_gone(pids: list[int], wait_s: float = 10) -> None:
    """Every one of `pids` has exited within `wait_s`."""
    deadline = time.monotonic() + wait_s
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(p) for p in pids), pids


def _socket_dsn(port: int) -> str:
    """The lab's embedded server over its private socket directory (TCP needs a password):
    found from the postmaster's command line, `-p <port> -k <dir>`."""
    ps = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True).stdout
    m = re.search(rf"-p {port} -k (\S+)", ps)
    assert m, f"no postmaster on port {port}"
    return f"postgresql://postgres@/postgres?host={m[1]}&port={port}"


def _wait_for_lock_waiters(dsn: str) -> tuple[str, int]:
    """Block until the server shows actor sessions waiting on a lock: the run is mid-flight."""
    import asyncio

    async def poll() -> tuple[str, int]:
        conn = await asyncpg.connect(dsn)
        try:
            data_dir = await conn.fetchval("SHOW data_directory")
            for _ in range(600):
                waiting = await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND application_name LIKE 'locklab/checkout-deadlock/buggy/%'"
                )
                if waiting:
                    break
                await asyncio.sleep(0.05)
            assert waiting, "no actor was ever seen waiting on a lock: the run was not mid-flight"
            pid = int((Path(data_dir) / "postmaster.pid").read_text().split()[0])
            return str(data_dir), pid
        finally:
            await conn.close()

    return asyncio.run(poll())


def test_servers_up_are_reused_then_stopped(tmp_path: Path) -> None:
    """`servers up` keeps servers for later runs (source says kept); `servers down` stops them by PID."""
    env = {
        "TMPDIR": str(tmp_path),
        "LOCKLAB_SERVERS": "auto",
        "DOCKER_HOST": "unix:///nonexistent.sock",
    }
    results = tmp_path / "results"
    up = locklab("servers", "up", results=results, env=env)
    assert up.returncode == 0, up.stderr
    state = json.loads((tmp_path / f"locklab-state-{os.geteuid()}" / "servers.json").read_text())
    pids = [state["pg_pid"], state["redis_pid"]]
    try:
        assert all(pid_alive(p) for p in pids)
        status = locklab("servers", "status", results=results, env=env)
        assert "kept by `locklab servers up`" in status.stdout
        ran = locklab(
            "run", "checkout-deadlock", "-n", "2", "-v", "fixed", "--json", results=results, env=env
        )
        assert ran.returncode == 0, ran.stderr
        rec = json.loads(ran.stdout)
        assert "kept" in rec["servers"]["postgresql"]["source"]
        assert all(pid_alive(p) for p in pids)  # the run did not stop kept servers
    finally:
        down = locklab("servers", "down", results=results, env=env)
    assert down.returncode == 0
    assert_gone(pids)
    assert not Path(state["base"]).exists()


def test_ctrl_c_stops_a_scenario_with_worker_processes(tmp_path: Path) -> None:
    """SIGINT during cron-rerun (pods are processes): exit 130, no pod, server or record left."""
    args = ["run", "cron-rerun", "-v", "buggy", "-p", "trials=100000"]
    with interruptible(tmp_path, *args) as (proc, errfile):
        pods = _wait_for_children(proc, "cron_rerun/pod.py", errfile)  # trials are under way
    assert errfile.read_text().strip().splitlines()[-1].startswith("locklab: interrupted")
    assert_gone(pods)
    assert not list(tmp_path.rglob("*.json"))


def _wait_for_children(proc: subprocess.Popen[str], marker: str, errfile: Path) -> list[int]:
    """PIDs of `proc`'s children whose command line contains `marker`, once there are some.
    Read from /proc, not `ps`: ps cuts `args` to $COLUMNS (80 off a tty), and a long
    checkout path pushed the marker out of sight."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the lab exited early: {errfile.read_text()}"
        if pids := [pid for pid, args in _children(proc.pid) if marker in args]:
            return pids
        time.sleep(0.05)
    raise AssertionError(f"no {marker} child appeared: {errfile.read_text()}")


def _children(parent: int) -> list[tuple[int, str]]:
    """(pid, command line) of each descendant of `parent` (a forked worker is the child of
    the lab's fork server, lab/procs/forkserver.py)."""
    procs: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # exited meanwhile
            continue
        procs[int(entry.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), args)  # field 4: ppid
    found = []
    for pid, (ppid, args) in procs.items():
        seen = {pid}
        while ppid not in (parent, 0, 1) and ppid in procs and ppid not in seen:
            seen.add(ppid)
            ppid = procs[ppid][0]
        if ppid == parent:
            found.append((pid, args))
    return found


async def test_an_unexpected_error_in_a_scenario_names_it(servers: Servers) -> None:
    """A script variant (or setup, or invariant) that raises anything becomes one named failure."""
    from lab.core.scenario import Env, Scenario
    from lab.errors import ScenarioFailure
    from lab.load.plan import RunPlan
    from lab.load.runner import run_plan
    from tests.conftest import knobs_for

    async def broken(env: Env) -> None:
        raise ZeroDivisionError("division by zero")

    toy = Scenario(id="toy", doc="Toy.\n", kind="script", variants={"buggy": broken},
                   outcomes=("ok",), uses=frozenset())  # fmt: skip
    plan = RunPlan(toy, ["buggy"], knobs_for(toy), {}, "t", write=False)
    with pytest.raises(
        ScenarioFailure, match=r"^toy / buggy: ZeroDivisionError: division by zero$"
    ):
        await run_plan(plan, servers)


async def test_connections_a_failing_scenario_left_open_are_closed(servers: Servers) -> None:
    """A script that fails between two connects leaves nothing open: the harness
    terminates every connection env.connect() handed out."""
    from lab.core.scenario import Env, Scenario
    from lab.errors import ScenarioFailure
    from lab.load.plan import RunPlan
    from lab.load.runner import run_plan
    from tests.conftest import knobs_for, pgbouncer_available

    opened: list[asyncpg.Connection] = []

    async def leaky(env: Env) -> None:
        opened.append(await env.connect())
        opened.append(await env.connect_via("transaction"))  # PgBouncer keeps its clients
        raise RuntimeError("the second connect failed")

    if not pgbouncer_available():
        pytest.skip("PgBouncer not installed")
    toy = Scenario(id="toy", doc="Toy.\n", kind="script", variants={"buggy": leaky},
                   outcomes=("ok",), uses=frozenset({"pg", "pgbouncer"}))  # fmt: skip
    plan = RunPlan(toy, ["buggy"], knobs_for(toy), {}, "t", write=False)
    with pytest.raises(ScenarioFailure, match="the second connect failed"):
        await run_plan(plan, servers)
    assert len(opened) == 2 and all(c.is_closed() for c in opened)


def test_a_missing_server_binary_is_one_line(tmp_path: Path) -> None:
    """LOCKLAB_REDIS_SERVER pointing nowhere: one line naming the problem, exit 2."""
    proc = locklab(
        "run", "cache-stampede", "-n", "2", results=tmp_path,
        env={"LOCKLAB_SERVERS": "embedded", "LOCKLAB_REDIS_SERVER": str(tmp_path / "no-such-redis-server")},
    )  # fmt: skip
    assert proc.returncode == 2
    assert_one_line_error(
        proc, r"LOCKLAB_REDIS_SERVER=.*no-such-redis-server: not an executable file", tmp_path
    )


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (
            ["checkout-deadlock", "-p", "isolation=foo"],
            r"-p isolation='foo': one of read_committed",
        ),
        (["cache-stampede", "-p", "poll_ms=0"], r"-p poll_ms=0.0: more than 0 ms"),
        (
            ["lock-order-prevention", "-p", "lock_ttl_ms=0"],
            r"-p lock_ttl_ms=0: at least 1 ms",
        ),
        (["money-transfer", "-p", "amount=0"], r"-p amount=0: at least 1$"),
        (
            ["cron-rerun", "-p", "crash_after=9"],
            r"-p crash_after=9: must be between 0 and customers",
        ),
        (["job-queue", "-n", "1", "-p", "crash=worker-1"], r"-p crash needs -n 2 or more"),
        (["lease-gc-pause", "-p", "pause_mode=nap"], r"-p pause_mode='nap': one of sigstop, sleep"),
        (["upsert-idempotency", "-n", "1"], r"-n 1: the race needs at least 2 concurrent requests"),
    ],
)
def test_impossible_scenario_knobs(tmp_path: Path, args: list[str], pattern: str) -> None:
    """A scenario knob it cannot run with: one line from the scenario, exit 2, no record,
    before any server is touched (the servers given here do not answer)."""
    proc = locklab(
        "run", *args, "--pg-dsn", "postgresql://127.0.0.1:1/postgres",
        "--redis-url", "redis://127.0.0.1:1/0", results=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert_one_line_error(proc, pattern, tmp_path)
    assert "server " not in proc.stderr  # no server was resolved


def test_show_prints_the_spec_as_written(tmp_path: Path) -> None:
    """`show` into a pipe: the docstring's lines verbatim (not re-wrapped), variants, claims."""
    from scenarios.update_lock_order import SCENARIO

    proc = locklab("show", "update-lock-order", results=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for line in SCENARIO.doc.strip().splitlines():
        assert line.rstrip() in lines, line
    assert "variants: buggy, fixed" in lines
    assert sum(line.startswith("claim LC-1 ") for line in lines) == len(SCENARIO.claims)


def test_servers_up_after_a_kept_server_died_stops_the_survivor(tmp_path: Path) -> None:
    """A state file whose Redis died: `servers up` stops the PostgreSQL it recorded (by
    PID) before starting a new pair, instead of orphaning it."""
    env = {
        "TMPDIR": str(tmp_path),
        "LOCKLAB_SERVERS": "auto",
        "DOCKER_HOST": "unix:///nonexistent.sock",
    }
    results = tmp_path / "results"
    state_file = tmp_path / f"locklab-state-{os.geteuid()}" / "servers.json"
    assert locklab("servers", "up", results=results, env=env).returncode == 0
    first = json.loads(state_file.read_text())
    try:
        stop_pid(first["redis_pid"])
        assert_gone([first["redis_pid"]])
        again = locklab("servers", "up", results=results, env=env)
        assert again.returncode == 0, again.stderr
        assert_gone([first["pg_pid"]])
        assert not Path(first["base"]).exists()
        second = json.loads(state_file.read_text())
        assert pid_alive(second["pg_pid"]) and pid_alive(second["redis_pid"])
    finally:
        assert locklab("servers", "down", results=results, env=env).returncode == 0


def test_status_beside_a_state_folder_others_may_write(tmp_path: Path) -> None:
    """A state folder others may write: `servers status` names it and does not advise
    `servers up`, which would refuse the same folder."""
    folder = tmp_path / f"locklab-state-{os.geteuid()}"
    folder.mkdir()
    folder.chmod(0o777)
    status = locklab(
        "servers", "status", results=tmp_path / "results", env={"TMPDIR": str(tmp_path)}
    )
    assert status.returncode == 0, status.stderr
    assert "others may write it" in status.stderr
    assert "is not usable; remove it or set TMPDIR" in status.stdout
    assert "servers up" not in status.stdout
