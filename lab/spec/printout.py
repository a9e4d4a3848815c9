"""A result set as the isolation tester prints one: libpq's PQprint, aligned, "|" between.

Widths count bytes (PQprint pads with printf's ``%-*s``); a column is right-aligned when
every non-empty value looks numeric (digits, ``.``, ``e``, ``E``, space or ``-``, not
starting with an ``e``, ending in a digit), its header too; empty and NULL values print as
padding and do not count; every cell is padded, the last one too.
"""

from __future__ import annotations

from lab.spec.wire import Result

NUMERIC_CHARS = frozenset("0123456789.Ee -")


def looks_numeric(value: str) -> bool:
    """PQprint's test of one value (it checks bytes: any non-ASCII byte is not numeric)."""
    return (
        all(ch in NUMERIC_CHARS for ch in value)
        and value[0] not in "Ee"
        and value[-1].isascii()
        and value[-1].isdigit()
    )


def _pad(text: str, width: int, right: bool) -> str:
    fill = " " * max(0, width - len(text.encode()))
    return fill + text if right else text + fill


def result_table(res: Result) -> str:
    """The text PQprint writes for one result set (nothing for a result without columns)."""
    if not res.columns:
        return ""
    n = len(res.columns)
    width = [len(name.encode()) for name in res.columns]
    numeric = [True] * n
    for row in res.rows:
        for j, value in enumerate(row):
            if not value:
                continue
            numeric[j] = numeric[j] and looks_numeric(value)
            width[j] = max(width[j], len(value.encode()))
    header = "|".join(_pad(name, width[j], numeric[j]) for j, name in enumerate(res.columns))
    border = "+".join("-" * w for w in width)
    lines = [header, border]
    lines += [
        "|".join(_pad(v or "", width[j], numeric[j]) for j, v in enumerate(row)) for row in res.rows
    ]
    count = len(res.rows)
    lines.append(f"({count} row{'' if count == 1 else 's'})")
    return "\n".join(lines) + "\n\n"
