"""The two kinds of failure the lab reports: the user's input, and a scenario gone wrong."""

from __future__ import annotations


class LabError(Exception):
    """A problem the user can fix (bad input, unreachable server): one line, no traceback."""


class ScenarioFailure(Exception):
    """A scenario did something it does not declare (an unexpected error or result)."""
