"""lab.kit.provider on a real process: late answers after charging, idempotency keys, the log."""

from __future__ import annotations

import pytest

from lab.errors import ScenarioFailure
from lab.kit.provider import Provider
from lab.procs import lifecycle

LATE_S, TIMEOUT_S = 0.5, 0.05  # the first charge answers late; the client gives up first
CHARGE = {"customer": "c-1", "period": "2026-09", "amount": 100}


async def test_a_late_answer_has_charged_and_a_key_replays_it() -> None:
    """The first charge times out at the client yet is recorded; the retry with the same
    key gets the stored charge back (replayed), a call without a key charges again, a
    message is logged, and close stops the process."""
    p = await Provider.start(LATE_S)
    try:
        key = {"Idempotency-Key": "bill:c-1:2026-09"}
        with pytest.raises(TimeoutError):
            await p.post("/charges", CHARGE, key, TIMEOUT_S)
        again = await p.post("/charges", CHARGE, key, 5)
        fresh = await p.post("/charges", CHARGE, {}, 5)
        sent = await p.post("/messages", {"to": "t1", "body": "t1: invoice paid"}, {}, 5)
        log = await p.log()
        with pytest.raises(ScenarioFailure, match="404"):
            await p.post("/refunds", {}, {}, 5)
    finally:
        await p.close()
    assert again["replayed"] and again["id"] == 1 and not fresh["replayed"] and fresh["id"] == 2
    assert [c["key"] for c in log["charges"]] == ["bill:c-1:2026-09", None]
    assert sent["id"] == 1 and [m["to"] for m in log["messages"]] == ["t1"]
    assert log["requests"] == 4
    assert not lifecycle.alive(p.pid)
