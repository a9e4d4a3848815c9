"""side-effects: what the documents claim, how each claim is judged, the provider's
lifecycle, and the assembly.

The provider (lab/kit/provider.py) is owned by the run as an observer would be: started after
setup, handed to the variant on env.state, its log read after the variant (the charges and
messages the claims count) and its process stopped, also when the variant failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.core.claims import Claim, Record, invariant_broken, invariants_hold
from lab.core.scenario import Defaults, Env, Observer, Param, declare
from lab.errors import LabError
from lab.kit.provider import Provider
from scenarios.side_effects import side_effects as code


async def start_provider(env: Env) -> None:
    provider = await Provider.start(env.params["late_reply_s"])
    env.state["provider"] = provider
    env.extra_evidence.update(provider_pid=provider.pid, provider_port=provider.port)


async def stop_provider(env: Env) -> None:
    provider: Provider = env.state["provider"]
    try:
        log = await provider.log()
        env.extra_evidence["provider"] = log
        env.add("charges", len(log["charges"]))
        env.add("messages", len(log["messages"]))
    finally:
        await provider.close()


def validate(n: int, p: Mapping[str, Any]) -> None:
    if p["client_timeout_s"] >= p["late_reply_s"]:
        raise LabError("-p client_timeout_s must be below late_reply_s (the fault)")


def _charge_trace(rec: Record) -> str:
    charges = rec["evidence"].get("provider", {}).get("charges", [])
    calls = [e for e in rec["trace"] if e["who"] == "job"]
    said = ", ".join(
        f"call {e['attempt']}: "
        + (
            "timed out"
            if e["event"] == "charge timed out"
            else "replayed"
            if e["replayed"]
            else "charged"
        )
        for e in calls
    )
    keys = sorted({str(c["key"]) for c in charges})
    return f"{said}; the provider recorded {len(charges)} charge(s) (keys: {', '.join(keys)})"


def _charges(variant: str, expect: int) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        rec = records[variant]
        timed_out = any(e["event"] == "charge timed out" for e in rec["trace"])
        n = len(rec["evidence"].get("provider", {}).get("charges", []))
        calls = rec["counters"].get("charge_calls", 0)
        # without a key every call charges (2 here: one late answer); with it, only the first
        held = timed_out and calls >= 2 and n == (calls if expect == 2 else 1)
        return held, f"{variant}: {_charge_trace(rec)}"

    text = (
        ("buggy: the provider times out after charging; the retry without a key charges twice")
        if expect == 2
        else ("fixed: the same retry with Idempotency-Key bill:{customer}:{period} charges once")
    )
    published = (
        "provider timeout sau khi đã xử lý"
        if expect == 2
        else "idempotency key bill:{customer}:{period} khi gọi payment provider"
    )
    return Claim("DL-26", text, (variant,), check, published)


def _messages(variant: str, per_attempt: bool) -> Claim:
    def check(records: Mapping[str, Record]) -> tuple[bool, str]:
        c = records[variant]["counters"]
        att, com, msg, dl = (c.get(k, 0) for k in ("attempts", "commits", "messages", "40P01"))
        held = dl >= 1 and att > com and msg == (att if per_attempt else com)
        return held, f"{variant}: {dl} x 40P01, {att} attempts, {com} commits, {msg} messages"

    text = (
        "buggy: a message sent inside a transaction repeats with every retry after 40P01"
        if per_attempt
        else "fixed: the outbox sends exactly one message per committed transaction"
    )
    return Claim("LC-32", text, (variant,), check, PUBLISHED_RETRY)


PUBLISHED_RETRY = (
    "nếu trong fn có gửi email hay gọi payment thì side effect bị lặp. Đưa side effect ra sau "
    "commit (outbox pattern)"
)
CLAIMS = (
    _charges("buggy", 2),
    _charges("fixed", 1),
    invariant_broken("DL-26", "buggy", code.ONE_CHARGE, "buggy: two charges for one invoice"),
    _messages("buggy", per_attempt=True),
    _messages("fixed", per_attempt=False),
    invariant_broken("LC-32", "buggy", code.ONE_MESSAGE, "buggy: more messages than commits"),
    invariants_hold(
        "DL-26", "fixed", "fixed: one charge per invoice (and one message per commit)", "", None
    ),
    invariants_hold(
        "LC-32", "fixed", "fixed: one message per commit (and one charge per invoice)", "", None
    ),
)

SCENARIO = declare(
    code,
    validate=validate,
    kind="script",
    variants={"buggy": code.buggy, "fixed": code.fixed},
    outcomes=("charged", "charge_failed", "committed", "40P01"),
    claims=CLAIMS,
    observers=(Observer("provider", start_provider, stop_provider),),
    defaults=Defaults(n=3, actor_timeout_s=30, run_timeout_s=60),
    params={
        "client_timeout_s": Param(
            code.CLIENT_TIMEOUT_S, "the billing job's HTTP timeout for one charge call", above=0
        ),
        "late_reply_s": Param(
            code.LATE_REPLY_S, "the provider answers its first charge this late, after charging"
        ),
    },
    uses=frozenset({"pg"}),
    sources=("DL", "LC"),
    headline={"charges": "charges", "messages": "messages", "attempts": "attempts"},
    quick={"deadlock_timeout_ms": 200},
)
