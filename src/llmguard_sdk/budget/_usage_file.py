"""What the commands that read a :class:`~llmguard_sdk.budget.UsageRecorder` file (``llmguard
cost report``, ``llmguard report``, and :func:`~llmguard_sdk.telemetry.report.write_report`) say
of one with no usage record in it: that it is not JSON Lines, naming its first line that is not
JSON (a CSV export, one object over many lines), or that it holds no usage record (JSON Lines of
other records); and of one with records, how many of its lines were skipped as not JSON."""

from __future__ import annotations

import json

__all__ = ["no_usage_records", "not_json_lines", "skipped_lines"]


def _lines_not_json(path: str) -> tuple[int, int | None]:
    """How many lines of ``path`` (read already: UTF-8 text) are not JSON (blank lines
    aside), and the number of the first (None when each is)."""
    count, first = 0, None
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            try:
                json.loads(line) if line.strip() else None
            except ValueError:
                count += 1
                first = first or number
    return count, first


def skipped_lines(path: str) -> str | None:
    """``skipped N lines of PATH that are not JSON (the first: line K)`` of a file whose
    usage records were read (its other lines skipped, as a line cut by a crash is), or None
    when each of its lines is JSON: the report is then of part of the file."""
    count, first = _lines_not_json(path)
    if not count:
        return None
    if count == 1:
        return f"skipped 1 line of {path} that is not JSON (line {first})"
    return f"skipped {count} lines of {path} that are not JSON (the first: line {first})"


def not_json_lines(path: str) -> str | None:
    """``PATH is not JSON Lines: line N is not JSON (...)`` of a file read already (UTF-8
    text) with no usage record in it, or None when each of its lines is JSON."""
    line = _lines_not_json(path)[1]
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
