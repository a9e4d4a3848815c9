"""money-transfer, what the retry loop does, judged on load records: DL-7, retries do not
save the buggy batch and the fix needs none (attempts = transfers); DL-8, a deadlock retried
at once repeats, and jittered backoff alone cuts failures at low contention; DL-9, the fix
never retries a business error where buggy retries every error; LC-2, a deadlock loser
retried from its first read commits with the balances still right.
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.core.claims import NotReproduced, Record
from lab.core.outcome import notation
from scenarios.money_transfer.invariant import MOVED_ONCE
from scenarios.money_transfer.money_transfer import RETRYABLE

MIN_ATTEMPTS_PER_TRANSFER = 3  # buggy, of at most 6: measured 3.6-6 at 10 transfers, 5.2-5.9 at 40
LOW_CONTENTION_N = 10  # transfers; jitter alone helped at 10, not at 20 or 40 (measured)


def _attempts(rec: Record) -> int:
    return int(rec.get("counters", {}).get("attempts", 0))


def _fixed_no_retry(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["fixed"]
    n = rec["knobs"]["n"]
    return _attempts(rec) == n, f"fixed: attempts={_attempts(rec)} for {n} transfers"


def _buggy_attempts(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    n = rec["knobs"]["n"]
    a = _attempts(rec)
    return (
        a >= MIN_ATTEMPTS_PER_TRANSFER * n,
        f"buggy: attempts={a} for {n} transfers ({a / n:.1f}×)",
    )


def _buggy_still_failing(records: Mapping[str, Record]) -> tuple[bool, str]:
    """Most transfers still fail with 40P01 after the retries, as the document's 29 of 40;
    fewer (measured here 18-37 of 40) is the document's number not reproduced."""
    rec = records["buggy"]
    n, failed = rec["knobs"]["n"], rec["outcomes"].get("40P01", 0)
    seen = (
        f"buggy: {notation(rec['outcomes'])} attempts={_attempts(rec)} in {rec['wall_ms']:.0f} ms"
    )
    if failed * 2 <= n:
        raise NotReproduced(f"{seen}: {failed} of {n} failed, not most")
    return True, seen


def _failed(rec: Record) -> int:
    return sum(c for k, c in rec["outcomes"].items() if k != "ok")


def _retried(rec: Record) -> dict[str, int]:
    counters = rec.get("counters", {})
    return {k.removeprefix("retried_"): v for k, v in counters.items() if k.startswith("retried_")}


def _jitter_cuts_failures(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    """Jitter alone fails at most half as many transfers as retrying at once: a cut two
    runs' noise does not make (at 40 transfers one variant's runs differ by a few, and a
    plain "fewer" then held or failed by chance). At more than LOW_CONTENTION_N transfers
    (the document's 40) a miss is the document's suggestion not reproduced here, with the
    figures; at LOW_CONTENTION_N or fewer it fails."""
    buggy, jitter = records["buggy"], records["buggy-jitter"]
    n = buggy["knobs"]["n"]
    if not (_failed(buggy) or _failed(jitter)):
        return None  # with none failing on either side there was nothing to cut
    seen = (
        f"failed transfers of {n}: buggy {_failed(buggy)} (attempts={_attempts(buggy)}), "
        f"buggy-jitter {_failed(jitter)} (attempts={_attempts(jitter)})"
    )
    if 2 * _failed(jitter) <= _failed(buggy):
        return True, seen
    if n > LOW_CONTENTION_N:
        raise NotReproduced(f"{seen}: jitter alone did not halve them")
    return False, seen


def _business_errors(rec: Record) -> int:
    """Transfers that met insufficient funds: the fix's own check says so, the buggy code
    hits the balance >= 0 CHECK (23514)."""
    return rec["outcomes"].get("insufficient_funds", 0) + rec["outcomes"].get("23514", 0)


def _fixed_never_retries_business(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    """Counted from attempts, not from what the retry loop says it retried: every attempt
    beyond one per transfer must be the retry of a concurrency error."""
    rec = records["fixed"]
    business = _business_errors(rec)
    if not business:
        return None  # no business error in this run (try -p amount=150000)
    retried = _retried(rec)
    concurrency = sum(v for k, v in retried.items() if k in RETRYABLE)
    extra = _attempts(rec) - rec["knobs"]["n"]
    return extra == concurrency and set(retried) <= set(RETRYABLE), (
        f"fixed: business errors={business}, attempts={_attempts(rec)} for "
        f"{rec['knobs']['n']} transfers, retried {retried or 'nothing'}"
    )


def _buggy_retries_business(records: Mapping[str, Record]) -> tuple[bool, str] | None:
    rec = records["buggy"]
    business = {k: v for k, v in _retried(rec).items() if k not in RETRYABLE}
    if not business and not _business_errors(rec):
        return None  # no business error in this run (try -p amount=150000)
    return bool(business), f"buggy: retried {business} (23514: balance >= 0 CHECK violated)"


def _whole_transaction_retried(records: Mapping[str, Record]) -> tuple[bool, str]:
    rec = records["buggy"]
    again = rec.get("counters", {}).get("ok_after_retry", 0)
    invs = {i["name"]: i["held"] for i in rec.get("invariants", [])}
    moved = invs.get(MOVED_ONCE, False)
    return again > 0 and moved, (
        f"buggy: {again} transfers committed on a retry after 40P01; "
        f"balances {'match' if moved else 'do not match'} the commits"
    )
