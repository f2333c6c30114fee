"""What the commands that read a :class:`~llmguard_sdk.budget.UsageRecorder` file (``llmguard
cost report``, ``llmguard report``, and :func:`~llmguard_sdk.telemetry.report.write_report`) say
of one with no usage record in it: that it is not JSON Lines, naming its first line that is not
JSON (a CSV export, one object over many lines), or that it holds no usage record (JSON Lines of
other records)."""

from __future__ import annotations

import json

__all__ = ["not_json_lines", "no_usage_records"]


def _first_line_not_json(path: str) -> int | None:
    """The number of the first line of ``path`` (read already: UTF-8 text) that is not JSON
    (blank lines aside), None when each is."""
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            try:
                json.loads(line) if line.strip() else None
            except ValueError:
                return number
    return None


def not_json_lines(path: str) -> str | None:
    """``PATH is not JSON Lines: line N is not JSON (...)`` of a file read already (UTF-8
    text) with no usage record in it, or None when each of its lines is JSON."""
    line = _first_line_not_json(path)
    if line is None:
        return None
    return (
        f"{path} is not JSON Lines: line {line} is not JSON (a UsageRecorder file holds a "
        "JSON object per line)"
    )


def no_usage_records(path: str) -> str:
    """What is said of a file read already with no usage record in it: not JSON Lines (naming
    the line), else ``no usage records in PATH``."""
    return not_json_lines(path) or f"no usage records in {path}"
