"""id-sort-order: the code under test in id_sort_order.py, its claims in claims.py, its
transcripts in expected/."""

from __future__ import annotations

from scenarios.id_sort_order.claims import SCENARIO
from scenarios.id_sort_order.id_sort_order import js_default_sort

__all__ = ["SCENARIO", "js_default_sort"]
