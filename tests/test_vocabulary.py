"""One vocabulary for verdicts: each of the six statuses reads the same word in the
console, in `locklab diff`, on the HTML page, and is the same key in the JSON."""

from __future__ import annotations

from io import StringIO

import pytest
from rich.console import Console

from lab.core.claims import STATUSES
from lab.output.scenario_view import verdict_badge
from lab.output.verdicts import WORDS, held_word, status_text

SIX = {
    "held": "held",
    "not held": "NOT HELD",
    "fitted": "FITTED",
    "not reproduced": "NOT REPRODUCED",
    "not judged": "NOT JUDGED",
    "not exercised": "not exercised",
}


def test_every_status_has_its_one_word() -> None:
    """The statuses the lab counts are the six, each with the word the issue names."""
    assert set(STATUSES) == set(WORDS) == set(SIX)
    assert {status: word for status, (word, _) in WORDS.items()} == SIX


@pytest.mark.parametrize("status", STATUSES)
def test_a_status_reads_the_same_on_every_screen(status: str) -> None:
    """Console, diff and the HTML badge print the status's word; the JSON keeps the key."""
    verdict = {"id": "X-1", "text": "a claim", "held": status == "held", "status": status}
    buf = StringIO()
    Console(file=buf, width=80, color_system=None).print(held_word(verdict))
    assert buf.getvalue().strip() == SIX[status]  # the console
    assert status_text(verdict) == SIX[status]  # locklab diff
    assert verdict_badge(verdict).word == SIX[status]  # the HTML page
    assert verdict["status"] in STATUSES  # the JSON
