"""lease-gc-pause DL-11, fencing: even with compare-and-delete A and B both believe they
hold the lock for a while (the lease window), so only the fence decides whose write lands.
Fenced, B's write lands and A's stale one changes 0 rows; unfenced, A's stale write lands
over B's. Judged on the timed run's trace, timeline and final row, and by the invariant (the
fence never goes backwards), read from a log of every write that landed, which a trigger
keeps: observation added to the code's own tables (`schema`).
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import Record
from lab.core.scenario import Check, Env
from scenarios.lease_gc_pause import lease_gc_pause as code
from scenarios.lease_gc_pause.reading import (
    _both,
    _during,
    event,
    fence_rejected_a,
    writes,
)

FENCE_INVARIANT = "fence never goes backwards"
# observation only: every write that landed, with the fence it replaced
WRITE_LOG = """
    CREATE TABLE invoice_writes (seq bigserial PRIMARY KEY, old_fence bigint,
                                 new_fence bigint, body text);
    CREATE FUNCTION log_invoice_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
      INSERT INTO invoice_writes (old_fence, new_fence, body)
      VALUES (OLD.fence, NEW.fence, NEW.body); RETURN NEW; END $$;
    CREATE TRIGGER invoice_writes AFTER UPDATE ON invoices
      FOR EACH ROW EXECUTE FUNCTION log_invoice_write();"""


async def schema(env: Env) -> None:
    """The code's own tables, and the log of writes the invariant reads."""
    await code.schema(env)
    await env.db.execute(WRITE_LOG)


async def invariant(env: Env) -> list[Check]:
    """The invoice's fence never went backwards: no holder with an older lease wrote last."""
    rows = await env.db.fetch("SELECT old_fence, new_fence, body FROM invoice_writes ORDER BY seq")
    back = [
        f"{w['body']} wrote fence {w['new_fence']} over {w['old_fence']}"
        for w in rows
        if w["new_fence"] <= w["old_fence"]
    ]
    done = ", ".join(f"{w['old_fence']}->{w['new_fence']}" for w in rows) or "no writes"
    return [Check(FENCE_INVARIANT, not back, "; ".join(back) or done)]


def _lease_window(records: Mapping[str, Record]) -> tuple[bool, str]:
    ab = _both(records["fixed"], "A", "B")
    return ab is not None, f"fixed: A and B both believed they held: {_during(ab)}"


def _fenced(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    row = rec["evidence"].get("final_row") or {}
    held = fence_rejected_a(rec) and row.get("fence") == event(rec, "B", "write")["fence"]
    return held, f"fixed: {writes(rec)}"


def _stale_write(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    aw, bw = event(rec, "A", "write"), event(rec, "B", "write")
    held = (
        bool(aw and bw)
        and aw["rows"] == 1
        and bw["t_ms"] < aw["t_ms"]
        and aw["fence"] < bw["fence"]
    )
    return held, f"buggy: {writes(rec)}"
