"""service-lock-order: what the documents claim, how each claim is judged, and the assembly.

Both claims are judged on one run per variant (the code in service_lock_order.py, the
services in their own processes, watched by watch.py): buggy's freeze evidence (the
wait-for cycle, the tries and SETs counted while it stood, the processes' kernel
states), fixed's two `done`s.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Claim, Record
from lab.core.scenario import Defaults, Param, declare
from scenarios.service_lock_order import service_lock_order as code


def _frozen(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    f = rec["evidence"].get("freeze", {})
    tries = f.get("tries", {})
    held = (
        rec["outcomes"] == {"frozen": 2}
        and len(f.get("cycle", [])) == 2
        and all(b > a for a, b in tries.values())
        and f.get("redis_set_calls", 0) > 0
        and all(s in ("S", "R") for s in f.get("process_state", {}).values())
    )
    return held, (
        f"buggy: {'; '.join(f.get('cycle', [])) or 'no cycle'}; unchanged {f.get('window_ms')} ms "
        f"while both kept polling (tries {tries}, Redis counted {f.get('redis_set_calls')} SETs),"
        f" processes alive ({f.get('process_state')}), no error; then killed by PID"
    )


def _completes(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    held = rec["outcomes"] == {"done": 2} and "freeze" not in rec["evidence"]
    return held, f"fixed (sorted keys): {rec['outcomes']} in {rec.get('wall_ms', 0):.0f} ms"


PUBLISHED = "如果它们共享资源（数据库行、Redis 键、文件），就会发生冲突"
CLAIMS = (
    Claim(
        "DP-10",
        "buggy: two services with opposite orders on the same Redis keys freeze "
        "each other: no error, no crash, no progress",
        ("buggy",),
        _frozen,
        PUBLISHED,
    ),
    Claim(
        "DP-10",
        "fixed: the same services with one order across them both complete",
        ("fixed",),
        _completes,
        "在各服务之间协调锁顺序",
    ),
)

SCENARIO = declare(
    code,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed},
    outcomes=("done", "frozen"),
    claims=CLAIMS,
    defaults=Defaults(n=2, actor_timeout_s=30, run_timeout_s=60),
    params={
        "freeze_window_ms": Param(
            code.FREEZE_WINDOW_MS, "a wait-for cycle unchanged this long counts as a freeze", min=50
        ),
    },
    uses=frozenset({"redis"}),
    sources=("DP",),
    quick={"freeze_window_ms": 300},
)
