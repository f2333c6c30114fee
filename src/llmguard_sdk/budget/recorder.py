"""Recorded usage: a Guard hook that appends one JSON line per call, and the cost report.

The format is JSON Lines, one object per guarded call::

    {"ts": 1767225600.12, "kind": "chat", "outcome": "ok", "tenant": "acme",
     "feature": "faq", "user": "u-42", "route": "primary", "model": "gpt-4o-mini",
     "input_tokens": 812, "output_tokens": 164, "cached_input_tokens": 512,
     "cache_write_input_tokens": 0, "cost_usd": 0.000182, "cost_source": "estimated",
     "latency_s": 0.84, "route_errors": {"openai": "ProviderUnavailableError"}}

``route`` is the route that answered (``null`` when none did); ``route_errors`` names the error
of each route that failed on the way (its class's name), so failures are counted per route.
``cost_usd`` is the answer's cost; for a call without an answer (failed, cancelled), what its
requests that went out cost, as its budgets were charged for them (``null`` when none went
out), so the file's spend is the budgets' spend.

``llmguard cost report FILE`` groups it per tenant and feature.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..context import CallEvent
from ..errors import ConfigurationError

__all__ = ["UsageRecorder", "read_usage", "usage_report"]


class UsageRecorder:
    """A Guard hook that appends each call's usage and cost to a JSON Lines file::

        recorder = UsageRecorder("usage.jsonl")
        guard = Guard(providers, hooks=[recorder])

    Args:
        path: the file to append to (created when missing).
        ids: ``"clear"`` (default) writes tenant and user ids as they are; ``"hashed"``
            writes their digests (:func:`~llmguard_sdk.store.hash_id`).
    """

    def __init__(self, path: str | Path, *, ids: str = "clear") -> None:
        if ids not in ("clear", "hashed"):
            raise ConfigurationError("ids must be 'clear' or 'hashed'")
        self.path = Path(path)
        self._hashed = ids == "hashed"
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"UsageRecorder({str(self.path)!r})"

    def record(self, event: CallEvent) -> dict[str, Any]:
        """The JSON object written for ``event``."""
        from .._state.stores import hash_id

        def who(value: str | None) -> str | None:
            return hash_id(value) if (self._hashed and value is not None) else value

        usage = event.usage
        return {
            "ts": round(time.time(), 3),
            "kind": event.kind,
            "outcome": event.outcome,
            "tenant": who(event.scope.tenant),
            "feature": event.scope.feature,
            "user": who(event.scope.user),
            "route": event.route,
            "model": event.model,
            "input_tokens": usage.input_tokens if usage else 0,
            "output_tokens": usage.output_tokens if usage else 0,
            "cached_input_tokens": usage.cached_input_tokens if usage else 0,
            "cache_write_input_tokens": usage.cache_write_input_tokens if usage else 0,
            "cost_usd": getattr(event, "cost_usd", None),
            "cost_source": getattr(event, "cost_source", None),
            "latency_s": round(event.latency_s, 4),
            # (the error's class name, as the file always had it: not the event's full name)
            "route_errors": {route: kind.rpartition(".")[2] for route, kind in event.route_errors},
        }

    def __call__(self, event: CallEvent) -> None:
        """Append ``event``'s record to the file as one JSON line (thread-safe)."""
        line = json.dumps(self.record(event), separators=(",", ":")) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(line)


def read_usage(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a usage file, skipping lines that are not usage records: JSON objects
    with an ``outcome``, as :class:`UsageRecorder` writes each (an EvalSink file's lines, say,
    were counted as failed calls)."""
    try:
        with Path(path).open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and "outcome" in record:
                    yield record
    except OSError as exc:
        raise ConfigurationError(f"cannot read usage file {path}: {exc}") from None
    except UnicodeDecodeError:  # a picture, an archive: not a usage file
        raise ConfigurationError(f"cannot read usage file {path}: not UTF-8 text") from None


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    return float(value) if math.isfinite(value) else 0.0


def usage_report(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Calls, successes, tokens and cost per tenant and feature, and the cost per
    successful call (the cost of failed calls included: they are part of what a success
    cost). Calls with usage but no known cost are counted in ``unpriced_calls``."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    total: dict[str, Any] = {"calls": 0, "ok": 0, "cost_usd": 0.0, "unpriced_calls": 0}
    for record in records:
        key = (str(record.get("tenant") or "-"), str(record.get("feature") or "-"))
        row = groups.setdefault(
            key,
            {
                "tenant": key[0],
                "feature": key[1],
                "calls": 0,
                "ok": 0,
                "input_tokens": 0,
                "output_tokens": 0,
                "cached_input_tokens": 0,
                "cost_usd": 0.0,
                "reported_usd": 0.0,
                "unpriced_calls": 0,
            },
        )
        row["calls"] += 1
        ok = record.get("outcome") == "ok"
        row["ok"] += ok
        for name in ("input_tokens", "output_tokens", "cached_input_tokens"):
            row[name] += int(_number(record.get(name)))
        cost = record.get("cost_usd")
        if cost is None:
            if _number(record.get("input_tokens")) or _number(record.get("output_tokens")):
                row["unpriced_calls"] += 1
        else:
            row["cost_usd"] += _number(cost)
            if record.get("cost_source") == "reported":
                row["reported_usd"] += _number(cost)
    rows = sorted(groups.values(), key=lambda r: (-r["cost_usd"], r["tenant"], r["feature"]))
    for row in rows:
        row["cost_per_success_usd"] = row["cost_usd"] / row["ok"] if row["ok"] else None
        for name in ("calls", "ok", "cost_usd", "unpriced_calls"):
            total[name] += row[name]
    total["cost_per_success_usd"] = total["cost_usd"] / total["ok"] if total["ok"] else None
    return {"groups": rows, "total": total}
