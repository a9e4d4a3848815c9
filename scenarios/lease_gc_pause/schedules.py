"""lease-gc-pause pinned (`locklab trace` / `explore`): A in its worker process, B and C in the
lab's loop, every lease command a step, and A's pause, wake and kill steps of their own.

Pinned, every lease is long (LONG_TTL_MS: none runs out between two steps by accident)
and A's pause is where A's lease runs out: the step freezes A (SIGSTOP, until the kernel
reports it stopped), then brings the end of A's lease forward to now (PEXPIRE 1) and waits
until Redis reports the key gone. A transcript shows the order of the story, not its
timing: `locklab run` tells it with the published TTL and times (choreography.py).

explore interleaves the first steps of A and B (EXPLORED: A up to its write, or its kill;
B's acquire and write): 15, 7 and 10 orders; the steps after them run in the order A, B, C.
"""

from __future__ import annotations

from pathlib import Path

from lab.core.scenario import Env
from lab.pinned.stage import Fault, InProcess, Staged
from scenarios.lease_gc_pause.lease_gc_pause import KEY, VARIANTS

LONG_TTL_MS = 30_000  # no pinned schedule comes near it
WORKER = Path(__file__).with_name("worker.py")
HOLDER = ("acquire", "write", "release")
GET_DEL = ("acquire", "write", "get", "del")  # buggy-get-then-del: the release is two steps
PAUSED = ("acquire", "pause", "wake", "write", "release")  # A: the pause before its write
Steps = dict[str, dict[str, tuple[str, ...]]]
STEPS: Steps = {
    "buggy": {"A": PAUSED, "B": HOLDER, "C": HOLDER},
    "fixed": {"A": PAUSED, "B": HOLDER, "C": HOLDER},
    "buggy-get-then-del": {
        "A": ("acquire", "write", "get", "pause", "wake", "del"),
        "B": GET_DEL,
        "C": GET_DEL,
    },
    "holder-killed": {"A": ("acquire", "pause", "kill"), "B": HOLDER, "C": HOLDER},
}
# the published story: A stalls past its lease, B takes the lock, A wakes, writes and
# releases, then C comes, then B releases
PUBLISHED = (
    "A acquire",
    "A pause",
    "B acquire",
    "B write",
    "A wake",
    "A write",
    "A release",
    "C acquire",
    "C write",
    "C release",
    "B release",
)
SCHEDULES: Steps = {
    "buggy": {"published": PUBLISHED},
    "fixed": {"published": PUBLISHED},
    "buggy-get-then-del": {
        "published": (
            "A acquire",
            "A write",
            "A get",
            "A pause",
            "B acquire",
            "B write",
            "A wake",
            "A del",
            "C acquire",
            "C write",
            "C get",
            "C del",
            "B get",
            "B del",
        ),
    },
    # B comes while A, frozen or not, still holds its lease; C after it ran out
    "holder-killed": {
        "killed": (
            "A acquire",
            "B acquire",
            "A pause",
            "A kill",
            "C acquire",
            "C write",
            "C release",
        )
    },
}
NOTES = {
    "published": "A stalls past its lease; B takes the lock; A wakes, writes, releases; C comes",
    "killed": "B is refused while A holds its lease; A dies frozen; C gets in once it ran out",
}
EXPLORED: Steps = {
    "buggy": {"A": PAUSED[:4], "B": HOLDER[:2]},
    "fixed": {"A": PAUSED[:4], "B": HOLDER[:2]},
    "buggy-get-then-del": {"A": STEPS["buggy-get-then-del"]["A"], "B": ("acquire",)},
    "holder-killed": {"A": STEPS["holder-killed"]["A"], "B": HOLDER[:2]},
}


def token(env: Env, who: str) -> str:
    """`who`'s random token (the same for the same seed)."""
    return f"{who}-{env.rng(ord(who)).getrandbits(64):016x}"


async def a_lease_runs_out(env: Env) -> bool:
    """A's lease ends now (PEXPIRE 1 while the value is A's token); True once it is gone."""
    key, mine = env.key(KEY), env.state["tokens"]["A"]
    if await env.redis.get(key) not in (mine, mine.encode()):
        return True
    await env.redis.pexpire(key, 1)
    return False


def cast(env: Env, variant: str) -> dict[str, InProcess]:
    """The run's tokens (on env.state), and A: the lease worker, paused, woken or killed."""
    code = VARIANTS[variant]
    env.state["tokens"] = tokens = {who: token(env, who) for who in "ABC"}
    key = env.key(KEY)
    config = {
        "who": "A",
        "redis_url": env.redis_url,
        "dsn": env.dsn,
        "key": key,
        "fence_key": f"{key}:fence",
        "ttl_ms": env.params["ttl_ms"],
        "token": tokens["A"],
        "release": code.release,
        "fenced": code.fenced,
        "pause_at": code.pause_at,
    }
    pause = Fault("pause", a_lease_runs_out, f"A's lease runs out (PEXPIRE {KEY} 1)")
    return {
        "A": InProcess(
            WORKER, config, {"pause": pause, "wake": Fault("wake"), "kill": Fault("kill")}
        )
    }


PINNED = Staged(
    code=VARIANTS,
    steps=STEPS,
    schedules=SCHEDULES,
    sessions=("A", "B", "C"),
    explore=("buggy", "fixed"),
    notes=NOTES,
    params={"ttl_ms": LONG_TTL_MS},
    processes=cast,
    explore_steps=EXPLORED,
)
