"""`locklab new NAME`: a scenario file in the lab's shape, ready to run as written.

The skeleton is one file: setup, one session's code with named steps, a buggy and a fixed
variant that differ only in the fix (the read takes the row lock), one canonical
schedule, the invariant and one claim. `locklab run|trace|explore|verify ./NAME.py` work
on it at once; the user then replaces the checkout with their own code.
"""

from __future__ import annotations

import re
from pathlib import Path

from lab.errors import LabError

NAME_RE = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")

TEMPLATE = '''\
"""{title}: two buyers of the last item both check, both take it; stock goes below zero.

Symptom:    stock 1, two checkouts at once, both succeed: stock -1.
Root cause: check, then act: a plain SELECT takes no lock, so both buyers read 1 and
            both decrement.
Fix:        read with FOR UPDATE (fixed): the second buyer waits for the first one's
            commit, then reads 0 and stops.
See:        `locklab trace {path}`, `locklab explore {path}`, `locklab verify {path}`.

Written by `locklab new {name}`: replace the checkout with your own code, keep the shape.
"""

from __future__ import annotations

import sys

from lab.pinned import broke_in_some, kept_in_all
from lab.core.scenario import Check, Defaults, Env, Param, declare
from lab.core.steps import Pinned, Session

SKU = "A-1"
READ = "SELECT qty FROM stock WHERE sku = $1"
TAKE = "UPDATE stock SET qty = qty - 1 WHERE sku = $1"


async def setup(env: Env) -> None:
    """A fresh database each run (pinned runs reset its public schema before each)."""
    await env.db.execute("CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL)")
    await env.db.execute("INSERT INTO stock VALUES ($1, $2)", SKU, env.params["stock"])


async def _checkout(env: Env, s: Session, read: str) -> str:
    """One buyer: the steps read, take and commit (s.name is s1, s2, ...)."""
    async with s.transaction():
        qty = await s.fetchval("read", read, SKU)
        if qty < 1:
            return "out_of_stock"
        await s.execute("take", TAKE, SKU)
    return "ok"


async def buggy(env: Env, s: Session) -> str:
    return await _checkout(env, s, READ)


async def fixed(env: Env, s: Session) -> str:
    return await _checkout(env, s, READ + " FOR UPDATE")  # the fix, and only the fix


async def invariant(env: Env) -> list[Check]:
    """Checked after every run, pinned or loaded; env.outcomes counts the sessions' ends."""
    qty = await env.db.fetchval(READ, SKU)
    sold = env.outcomes.get("ok", 0)
    initial = env.params["stock"]
    return [
        Check("stock never below zero", qty >= 0, f"stock {{initial}} -> {{qty}}"),
        Check("no more sold than there was", sold <= initial, f"sold {{sold}} of {{initial}}"),
    ]


STEPS = {{"s1": ("read", "take", "commit"), "s2": ("read", "take", "commit")}}
# Both read before either takes. In fixed, s2's read waits for s1's lock until s1 commits.
BOTH_READ = ("s1 read", "s2 read", "s1 take", "s1 commit", "s2 take", "s2 commit")
PINNED = Pinned(
    code={{"buggy": buggy, "fixed": fixed}},
    steps={{"buggy": STEPS, "fixed": STEPS}},
    schedules={{
        "buggy": {{"both-read-first": BOTH_READ}},
        "fixed": {{"both-read-first": BOTH_READ}},
    }},
)

CLAIMS = (
    broke_in_some("{claim}", "buggy", "buggy: some order of two checkouts sells one item twice"),
    kept_in_all("{claim}", "fixed", "fixed: no order of two checkouts oversells"),
)

# its id (from this file's name: {id}), doc, setup, invariant and PINNED come from the module
SCENARIO = declare(
    sys.modules[__name__],
    outcomes=("ok", "out_of_stock"),
    claims=CLAIMS,
    defaults=Defaults(n=2, actor_timeout_s=30, run_timeout_s=60),
    params={{"stock": Param(1, "units of {sku} before the checkouts", min=0)}},
)
'''


def file_name(name: str) -> str:
    """`my-checkout` -> `my_checkout.py` (an importable module name)."""
    return name.replace("-", "_") + ".py"


def check_name(name: str) -> None:
    if not NAME_RE.fullmatch(name) or len(name) > 40:
        raise LabError(
            f"locklab new {name!r}: a name is lower-case letters, digits, - or _, "
            "starting with a letter (e.g. my-checkout), at most 40 characters"
        )


def render(name: str, shown_path: str) -> str:
    check_name(name)
    sid = name.replace("_", "-")
    claim = "".join(w[0] for w in sid.split("-")).upper() + "-1"
    return TEMPLATE.format(
        title=sid.replace("-", " ").capitalize(),
        name=name,
        path=shown_path,
        id=sid,
        claim=claim,
        sku="A-1",
    )


def write_skeleton(name: str, folder: Path) -> Path:
    """Write NAME's skeleton into `folder`; never over an existing file."""
    check_name(name)
    if folder.exists() and not folder.is_dir():
        raise LabError(f"--dir {folder}: not a folder")
    path = folder / file_name(name)
    shown = f"./{path.name}" if folder == Path(".") else str(path)
    if path.exists():
        raise LabError(f"{shown} exists already; not overwritten (pick another name or --dir)")
    folder.mkdir(parents=True, exist_ok=True)
    with path.open("x", encoding="utf-8") as f:
        f.write(render(name, shown))
    return path
