"""The row gate's SQL (no server needed; update-lock-order's transcripts run it live)."""

from __future__ import annotations

from lab.pinned import rowgate


def test_the_trigger_waits_on_the_session_gate_before_each_row_change() -> None:
    """The trigger fires BEFORE UPDATE on the table named, on the shared lock (key, lab.gate)."""
    ddl = rowgate.trigger("inventory", 4242)
    assert "pg_advisory_xact_lock_shared(4242, current_setting('lab.gate')::int)" in ddl
    assert "CREATE TRIGGER gate BEFORE UPDATE ON inventory FOR EACH ROW" in ddl
    assert rowgate.setting(2) == "SET LOCAL lab.gate = 2"


def test_the_gate_session_opens_each_gated_session() -> None:
    """The gate session closes once and opens s1 and s2, one step each."""
    assert ("close", *(f"open-s{k}" for k in rowgate.SESSIONS)) == rowgate.STEPS
