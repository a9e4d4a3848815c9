"""The lost update and the carts in Go (pgx) and in Java (pgjdbc), as their users write
them (examples/go, examples/java), explored through the gate: each buggy one breaks in its
first order, each fixed one keeps every order the reduction runs. `make examples` builds
them from Debian's golang-go with golang-github-jackc-pgx-v4-dev and default-jdk-headless
with libpostgresql-jdbc-java (.ci/run installs them); without those these tests skip.

The drivers' own groups are not steps: pgx's Parse/Describe before each new statement and
pgjdbc's two SETs at connect (docs/gate.md). Counted as steps they multiplied the orders:
the locked deposits ran 24 (pgx) and 70 (pgjdbc) orders where psql's ran 8 (6 now that a
last COMMIT moves past read committed statements on other tables)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lab.gate.actors import Actor
from lab.gate.explore import Exploration, explore
from lab.servers import Servers

ROOT = Path(__file__).resolve().parent.parent
GO_DIR, JAVA_DIR = ROOT / "examples" / "go", ROOT / "examples" / "java"
BUILD = ROOT / "build" / "examples"
GOCODE_PGX = Path("/usr/share/gocode/src/github.com/jackc/pgx/v4")  # Debian's, offline
PGJDBC = Path("/usr/share/java/postgresql.jar")  # Debian's libpostgresql-jdbc-java
SETUP = (GO_DIR / "setup.sql").read_text()
DEPOSITS_KEPT = (GO_DIR / "deposits-kept.sql").read_text()


def _built(target: str, missing: str | None) -> None:
    """`make TARGET` from the repository, or a skip that says what is missing."""
    if missing is None and shutil.which("make") is None:
        missing = "make is not installed"
    if missing is not None:
        pytest.skip(f"{missing} (apt-get install as .ci/run does, then make examples)")
    done = subprocess.run(["make", "-s", target], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def go() -> Path:
    """The Go examples' binaries, built by `make examples-go`."""
    missing = None
    if shutil.which("go") is None:
        missing = "go is not installed (golang-go)"
    elif not GOCODE_PGX.is_dir():
        missing = "Debian's pgx is not installed (golang-github-jackc-pgx-v4-dev)"
    _built("examples-go", missing)
    return BUILD / "go"


@pytest.fixture(scope="module")
def java() -> str:
    """The java command line that runs the Java examples, built by `make examples-java`."""
    missing = None
    if shutil.which("javac") is None or shutil.which("java") is None:
        missing = "java or javac is not installed (default-jdk-headless)"
    elif not PGJDBC.is_file():
        missing = "pgjdbc's jar is not installed (libpostgresql-jdbc-java)"
    _built("examples-java", missing)
    return f"java -cp {BUILD / 'java'}:{PGJDBC}"


async def _explore(
    servers: Servers, cwd: Path, pair: list[str], invariant: str, first: bool = False
) -> Exploration:
    """Explore two commands from `cwd`; print what ran (the orders and their outcomes)."""
    assert servers.pg is not None
    actors = [Actor(1, pair[0]), Actor(2, pair[1])]
    found = await explore(servers.pg.dsn, actors, SETUP, invariant, first=first, cwd=cwd)
    print(f"{' / '.join(pair)}: {len(found.orders)} orders, {dict(found.outcomes)}")
    return found


async def test_go_pgx_deposit_loses_one_and_the_locked_one_never(
    servers: Servers, go: Path
) -> None:
    """pgx's read-compute-write loses a deposit in the first order; FOR UPDATE keeps all 6."""
    deposit = f"{go}/deposit 10"
    buggy = await _explore(servers, GO_DIR, [deposit, deposit], DEPOSITS_KEPT, True)
    assert len(buggy.orders) == 1 and buggy.outcomes == {"broke a1=0 a2=0": 1}
    assert buggy.broke[0].run.transcript[:2] == [
        "step a1: SELECT balance FROM accounts WHERE id = $1  -- ('1')",
        "step a2: SELECT balance FROM accounts WHERE id = $1  -- ('1')",
    ]
    locked = f"{go}/deposit -locked 10"
    fixed = await _explore(servers, GO_DIR, [locked, locked], DEPOSITS_KEPT)
    assert fixed.complete and fixed.outcomes == {"kept a1=0 a2=0": 6}


async def test_go_pgx_carts_deadlock_and_sorted_carts_never(servers: Servers, go: Path) -> None:
    """pgx carts in opposite orders end in a 40P01 in the first order; sorted, all 6 keep."""
    carts = [f"{go}/checkout 101 202", f"{go}/checkout 202 101"]
    buggy = await _explore(servers, GO_DIR, carts, "SELECT true", True)
    assert len(buggy.orders) == 1 and "40P01" in buggy.broke[0].outcome()
    sorted_ = [f"{go}/checkout -sorted 101 202", f"{go}/checkout -sorted 202 101"]
    fixed = await _explore(servers, GO_DIR, sorted_, "SELECT true")
    assert fixed.complete and fixed.outcomes == {"kept a1=0 a2=0": 6}


async def test_java_pgjdbc_deposit_loses_one_and_the_locked_one_never(
    servers: Servers, java: str
) -> None:
    """pgjdbc's lost update breaks in the first order, its connect SETs no step; FOR UPDATE
    keeps all 6."""
    deposit = f"{java} Deposit 10"
    buggy = await _explore(servers, JAVA_DIR, [deposit, deposit], DEPOSITS_KEPT, True)
    assert len(buggy.orders) == 1 and buggy.outcomes == {"broke a1=0 a2=0": 1}
    assert not any("SET extra_float_digits" in line for line in buggy.broke[0].run.transcript)
    locked = f"{java} Deposit --locked 10"
    fixed = await _explore(servers, JAVA_DIR, [locked, locked], DEPOSITS_KEPT)
    assert fixed.complete and fixed.outcomes == {"kept a1=0 a2=0": 6}


async def test_java_pgjdbc_carts_deadlock_and_sorted_carts_never(
    servers: Servers, java: str
) -> None:
    """pgjdbc carts in opposite orders end in a 40P01 in the first order; sorted, all 6 keep."""
    carts = [f"{java} Checkout 101 202", f"{java} Checkout 202 101"]
    buggy = await _explore(servers, JAVA_DIR, carts, "SELECT true", True)
    assert len(buggy.orders) == 1 and "40P01" in buggy.broke[0].outcome()
    sorted_ = [f"{java} Checkout --sorted 101 202", f"{java} Checkout --sorted 202 101"]
    fixed = await _explore(servers, JAVA_DIR, sorted_, "SELECT true")
    assert fixed.complete and fixed.outcomes == {"kept a1=0 a2=0": 6}
